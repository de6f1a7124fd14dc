/**
 * The egress policy editor. Each change is sent at once as the whole policy (PATCH replaces it),
 * and the list is then drawn from the service's answer, which shows the patterns as it
 * normalized them (lowercase, punycode, no duplicates). A new connection sees the change at once.
 */
import type { EgressPolicy } from 'vessel/client';
import { ErrorBox, announce, field, fill, h, onSubmit, whileBusy } from '../dom.js';
import type { RuntimeContext, View } from '../view.js';

const DOING = 'Could not change the egress policy';

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
            const next = (): EgressPolicy => ({ ...policy(), allowed_hosts: policy().allowed_hosts.filter((p) => p !== pattern) });
            remove.addEventListener('click', () => void whileBusy(remove, errors, DOING, () => change(next(), `Removed ${pattern}.`)));
            return h('li', {}, h('code', {}, pattern), remove);
          }),
    );
  };

  /** Sends the whole policy; the list is drawn again from the answer, or as it stands after a failure. */
  const change = async (next: EgressPolicy, done: string): Promise<void> => {
    try {
      await runtime.patch({ egress_policy: next });
      announce(done);
    } finally {
      draw();
    }
  };

  enabled.addEventListener('change', () => {
    const on = enabled.checked;
    void whileBusy(add, errors, DOING, () => change({ ...policy(), enabled: on }, on ? 'Egress filtering is on.' : 'Egress filtering is off.'));
  });

  const form = h('form', { class: 'row' }, field('Host or pattern', host, '*.example.com matches every name below example.com, not example.com itself.'), h('div', { class: 'actions' }, add));
  onSubmit(form, add, errors, DOING, async () => {
    const pattern = host.value.trim();
    await change({ ...policy(), allowed_hosts: [...policy().allowed_hosts, pattern] }, `Allowed ${pattern}.`);
    host.value = '';
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
