/**
 * The egress policy editor. Each change is sent at once as the whole policy (PATCH replaces it),
 * and the list is then drawn from the service's answer, which shows the patterns as it
 * normalized them (lowercase, punycode, no duplicates). A new connection sees the change at once.
 */
import type { EgressPolicy } from 'vessel/client';
import { ErrorBox, announce, field, fill, h, whileBusy } from '../dom.js';
import type { RuntimeContext, View } from '../view.js';

export function egressSection(context: RuntimeContext): View {
  const { runtime } = context;
  const errors = new ErrorBox();
  const enabled = h('input', { type: 'checkbox' });
  const hosts = h('ul', { class: 'host-list', 'aria-label': 'Allowed hosts' });
  const host = h('input', { name: 'host', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'api.example.com or *.example.com' });
  const add = h('button', { type: 'submit' }, 'Add host');

  const policy = (): EgressPolicy => runtime.info.egress_policy;
  let drawn = '';
  const draw = (): void => {
    drawn = JSON.stringify(policy());
    enabled.checked = policy().enabled;
    const list = policy().allowed_hosts;
    fill(
      hosts,
      list.length === 0
        ? h('li', { class: 'empty' }, 'No host is allowed: every connection out is refused while filtering is on.')
        : list.map((pattern) => {
            const remove = h('button', { type: 'button', class: 'danger small', 'aria-label': `Remove ${pattern}` }, 'Remove');
            remove.addEventListener('click', () => void change(remove, { ...policy(), allowed_hosts: policy().allowed_hosts.filter((p) => p !== pattern) }, `Removed ${pattern}.`));
            return h('li', {}, h('code', {}, pattern), remove);
          }),
    );
  };

  const change = async (button: HTMLButtonElement, next: EgressPolicy, done: string): Promise<boolean> => {
    const ok = await whileBusy(button, errors, 'Could not change the egress policy', () => runtime.patch({ egress_policy: next }));
    draw();
    if (ok) announce(done);
    return ok;
  };

  enabled.addEventListener('change', () => {
    const next = { ...policy(), enabled: enabled.checked };
    void whileBusy(add, errors, 'Could not change the egress policy', () => runtime.patch({ egress_policy: next })).then((ok) => {
      draw();
      if (ok) announce(next.enabled ? 'Egress filtering is on.' : 'Egress filtering is off.');
    });
  });

  const form = h('form', { class: 'row' }, field('Host or pattern', host, '*.example.com matches every name below example.com, not example.com itself.'), h('div', { class: 'actions' }, add));
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const pattern = host.value.trim();
    if (pattern === '') return;
    void change(add, { ...policy(), allowed_hosts: [...policy().allowed_hosts, pattern] }, `Allowed ${pattern}.`).then((ok) => {
      if (ok) host.value = '';
    });
  });

  // Another tab or client may change the policy; the page's poll brings it here, but never
  // redraws under the keyboard's focus.
  const unsubscribe = context.onUpdate(() => {
    if (JSON.stringify(policy()) !== drawn && !element.contains(document.activeElement)) draw();
  });
  draw();

  const element = h(
    'section',
    { class: 'egress' },
    h('h2', {}, 'Egress'),
    field('Filter egress', enabled, 'On: only the hosts below can be reached, through the gateway, and every connection is audited. Off: connections go out unfiltered and unaudited (never to private addresses).'),
    h('h3', {}, 'Allowed hosts'),
    hosts,
    form,
    errors.element,
  );
  return { element, dispose: unsubscribe };
}
