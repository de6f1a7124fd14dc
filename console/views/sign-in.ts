/**
 * Sign in with a bearer token. The form is handled by script and declares method="post": were the
 * script to fail, a browser would not put the token in the address (and the CSP's form-action
 * 'none' keeps it from being sent at all).
 */
import type { Vessel } from 'vessel/client';
import { ErrorBox, field, h, onSubmit } from '../dom.js';
import { signIn } from '../session.js';
import type { View } from '../view.js';

export function signInView(onSignedIn: (vessel: Vessel) => void): View {
  const errors = new ErrorBox();
  const token = h('input', { type: 'password', name: 'token', required: true, autocomplete: 'off', spellcheck: 'false' });
  const submit = h('button', { type: 'submit' }, 'Sign in');
  const form = h(
    'form',
    { method: 'post', class: 'card narrow' },
    field('Access token', token, 'A token from `vessel token create`, or the admin token the service printed at its first start. It is kept in this tab only, until you sign out or close it.'),
    errors.element,
    h('div', { class: 'actions' }, submit),
  );
  onSubmit(
    form,
    submit,
    errors,
    'Could not sign in',
    async () => {
      const vessel = await signIn(token.value.trim());
      token.value = '';
      onSignedIn(vessel);
    },
    (ok) => {
      if (!ok) token.focus();
    },
  );
  return { element: h('section', { class: 'sign-in', 'aria-labelledby': 'sign-in-title' }, h('h1', { id: 'sign-in-title' }, 'Sign in to Vessel'), form), dispose() {} };
}
