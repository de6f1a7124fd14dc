/**
 * The tenant's runtimes with their status, polled (poll.ts says why), and a form to create one.
 * Rows are updated in place, keyed by id, so that a poll never takes focus away from a link.
 */
import type { Runtime, RuntimeInfo, Vessel } from 'vessel/client';
import { ErrorBox, announce, field, formatBytes, h, nameInput, onSubmit, table, time } from '../dom.js';
import { poll } from '../poll.js';
import { go, href } from '../router.js';
import type { View } from '../view.js';
import { statusBadge } from './status.js';

/** "8000, 8443/https" → ingress specs; http unless a port says otherwise. */
export function parseIngress(text: string): Array<{ runtime_port: number; protocol: 'http' | 'https' }> {
  return text
    .split(/[\s,]+/)
    .filter((part) => part !== '')
    .map((part) => {
      const match = /^(\d{1,5})(?:\/(https?))?$/i.exec(part);
      const port = Number(match?.[1]);
      if (match === null || port < 1 || port > 65535) throw new Error(`'${part}' is not a port (1 to 65535), optionally with /http or /https`);
      return { runtime_port: port, protocol: (match[2]?.toLowerCase() ?? 'http') as 'http' | 'https' };
    });
}

function createForm(vessel: Vessel): HTMLElement {
  const errors = new ErrorBox();
  const name = nameInput('name', true);
  const vcpus = h('input', { name: 'vcpus', type: 'number', min: 1, value: 1, required: true });
  const memory = h('input', { name: 'memory', type: 'number', min: 64, step: 64, value: 512, required: true });
  const ingress = h('input', { name: 'ingress', autocomplete: 'off', placeholder: '8000, 8443/https' });
  const submit = h('button', { type: 'submit' }, 'Create runtime');
  const form = h(
    'form',
    { class: 'card' },
    h('h2', {}, 'New runtime'),
    h(
      'div',
      { class: 'row' },
      field('Name', name, 'Letters, digits, dot, dash, underscore.'),
      field('vCPUs', vcpus),
      field('Memory (MiB)', memory),
      field('Ingress ports', ingress, 'Optional: ports served at public URLs, e.g. 8000 or 8443/https.'),
    ),
    errors.element,
    h('div', { class: 'actions' }, submit),
  );
  onSubmit(form, submit, errors, 'Could not create the runtime', async () => {
    const body = {
      display_name: name.value.trim(),
      resources: { vcpus: vcpus.valueAsNumber, limits: { memory_mib: memory.valueAsNumber } },
      ingress_specs: parseIngress(ingress.value),
    };
    announce(`Creating ${body.display_name}: its VM is booting.`);
    submit.textContent = 'Creating…';
    try {
      const runtime = await vessel.runtimes.create(body);
      announce(`${runtime.name} is ${runtime.status}.`);
      go({ view: 'runtime', runtime: runtime.name, section: 'terminal' });
    } finally {
      submit.textContent = 'Create runtime';
    }
  });
  return form;
}

function row(info: RuntimeInfo): HTMLTableRowElement {
  const link = h('a', { href: href({ view: 'runtime', runtime: info.display_name, section: 'terminal' }) }, info.display_name);
  return h('tr', { 'data-id': info.id }, h('th', { scope: 'row' }, link), h('td', { 'data-cell': 'status' }), h('td', { 'data-cell': 'vcpus' }), h('td', { 'data-cell': 'memory' }), h('td', { 'data-cell': 'labels' }), h('td', {}, time(info.created_at)));
}

function update(tr: HTMLTableRowElement, info: RuntimeInfo): void {
  const cell = (name: string) => tr.querySelector(`[data-cell="${name}"]`)!;
  cell('status').replaceChildren(statusBadge(info.status, info.status_message));
  cell('vcpus').textContent = String(info.resources.vcpus);
  cell('memory').textContent = formatBytes(info.resources.limits.memory_mib * 1024 * 1024);
  // Text only: labels are the user's own strings, never markup.
  cell('labels').textContent = Object.entries(info.labels).map(([key, value]) => `${key}=${value}`).join(', ');
}

export function runtimesView(vessel: Vessel): View {
  const errors = new ErrorBox();
  const list = table('Runtimes, with their status as of the last few seconds', ['Name', 'Status', 'vCPUs', 'Memory', 'Labels', 'Created']);
  const empty = h('p', { class: 'empty', hidden: true }, 'No runtimes yet: create one above.');
  const rows = new Map<string, HTMLTableRowElement>();

  const poller = poll(async (signal) => {
    let runtimes: Runtime[];
    try {
      runtimes = await vessel.runtimes.list({ signal }).toArray();
      errors.clear();
    } catch (error) {
      if (!signal.aborted) errors.show(error, 'Could not list the runtimes');
      throw error;
    }
    const seen = new Set<string>();
    let previous: HTMLTableRowElement | null = null;
    for (const { info } of runtimes) {
      seen.add(info.id);
      let tr = rows.get(info.id);
      if (tr === undefined) rows.set(info.id, (tr = row(info)));
      update(tr, info);
      // Newest first, as the API lists them; a row already in place is not moved (moving a focused link blurs it).
      const expected: ChildNode | null = previous === null ? list.body.firstChild : previous.nextSibling;
      if (expected !== tr) list.body.insertBefore(tr, expected);
      previous = tr;
    }
    for (const [id, tr] of rows) {
      if (seen.has(id)) continue;
      tr.remove();
      rows.delete(id);
    }
    empty.hidden = rows.size > 0;
    list.element.hidden = rows.size === 0;
  });

  const element = h('section', { class: 'runtimes' }, h('h1', {}, 'Runtimes'), createForm(vessel), errors.element, list.element, empty);
  return { element, dispose: () => poller.stop() };
}
