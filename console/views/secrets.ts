/**
 * Secrets: store one, delete one. A value is typed into a password field, sent once, and cleared
 * from the page whatever the answer; the API never returns it, so the list shows names only.
 */
import type { Secret, Vessel } from 'vessel/client';
import { ErrorBox, announce, confirmed, field, fill, h, nameInput, onSubmit, redrawKeepingFocus, table, time, whileBusy } from '../dom.js';
import { poll } from '../poll.js';
import type { View } from '../view.js';

export function secretsView(vessel: Vessel): View {
  const errors = new ErrorBox();
  const name = nameInput('name', true);
  const value = h('input', { name: 'value', type: 'password', required: true, autocomplete: 'new-password', spellcheck: 'false' });
  const ttl = h('input', { name: 'ttl', type: 'number', min: 0, value: 0 });
  const store = h('button', { type: 'submit' }, 'Store secret');
  const list = table('Secrets of this tenant (values are never shown)', ['Name', 'Id', 'Cache TTL', 'Created', 'Actions']);

  const draw = (secrets: Secret[]): void =>
    fill(
      list.body,
      secrets.length === 0
        ? h('tr', {}, h('td', { colspan: 5, class: 'empty' }, 'No secrets yet.'))
        : secrets.map((secret) => {
            const remove = h('button', { type: 'button', class: 'danger small', 'data-key': `delete:${secret.id}`, 'aria-label': `Delete secret ${secret.display_name}` }, 'Delete');
            remove.addEventListener('click', () => {
              if (!confirmed(`Delete secret '${secret.display_name}'? Runtimes can no longer have it injected.`)) return;
              void whileBusy(remove, errors, `Could not delete ${secret.display_name}`, async () => {
                await vessel.secrets.delete(secret.id);
                announce(`Deleted secret ${secret.display_name}.`);
                poller.now();
              });
            });
            return h(
              'tr',
              {},
              h('th', { scope: 'row' }, secret.display_name),
              h('td', {}, h('code', {}, secret.id)),
              h('td', {}, `${secret.cache_ttl_secs} s`),
              h('td', {}, time(secret.created_at)),
              h('td', { class: 'row-actions' }, remove),
            );
          }),
    );

  // Polled like the other lists, so that secrets made elsewhere appear.
  let drawn = '';
  const poller = poll(async (signal) => {
    try {
      const secrets = await vessel.secrets.list({ signal }).toArray();
      errors.clear();
      const seen = JSON.stringify(secrets);
      if (seen === drawn) return;
      drawn = seen;
      redrawKeepingFocus(list.element, () => draw(secrets));
    } catch (error) {
      if (!signal.aborted) errors.show(error, 'Could not list the secrets');
      throw error;
    }
  });

  const form = h(
    'form',
    { class: 'card' },
    h('h2', {}, 'New secret'),
    h(
      'div',
      { class: 'row' },
      field('Name', name),
      field('Value', value, 'Sent once and never shown again, here or by the API.'),
      field('Cache TTL (seconds)', ttl, 'How long the gateway may keep the decrypted value; 0 decrypts on every use.'),
    ),
    h('div', { class: 'actions' }, store),
  );
  onSubmit(form, store, errors, 'Could not store the secret', async () => {
    const body = { name: name.value.trim(), value: value.value, cache_ttl_secs: ttl.valueAsNumber || 0 };
    // Gone from the page before the answer, whatever it is.
    value.value = '';
    const secret = await vessel.secrets.create(body);
    name.value = '';
    announce(`Stored secret ${secret.display_name}.`);
    poller.now();
  });

  const element = h('section', { class: 'secrets' }, h('h1', {}, 'Secrets'), form, errors.element, list.element);
  return { element, dispose: () => poller.stop() };
}
