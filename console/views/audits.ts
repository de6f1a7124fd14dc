/**
 * The runtime's egress audits, newest first, filtered by kind, decision and host. The API filters
 * by runtime only, so the newest audits are fetched and the rest is filtered here; the table says
 * how many of those it shows. Polled while "Live" is on (poll.ts says why polling).
 */
import type { Audit } from 'vessel/client';
import { ErrorBox, field, fill, h, table, time } from '../dom.js';
import { poll, type Poller } from '../poll.js';
import { visible } from '../visible.js';
import type { RuntimeContext, View } from '../view.js';

/** The newest audits fetched per look: a screen's worth many times over, and one request. */
const FETCHED = 500;

type EgressPayload = NonNullable<Audit['payload']['egress']>;
type Kind = EgressPayload['kind'];

/** What one audit says, whatever its kind (docs/network.md, "Audits"). */
export interface Decision {
  kind: Kind;
  action: string;
  host: string;
  port: string;
  request: string;
  reason: string;
}

/** Of an egress audit: the view asks for category egress only. Its fields as shown: their control characters visible. */
export function decisionOf(audit: Audit): Decision {
  const egress = audit.payload.egress as EgressPayload;
  const { kind } = egress;
  const fields = (egress[kind] ?? { action: '' }) as Record<string, unknown>;
  const text = (name: string): string => {
    const value = fields[name];
    if (value === undefined || value === null) return '';
    return visible(typeof value === 'object' ? JSON.stringify(value) : String(value as string | number | boolean));
  };
  const request = kind === 'http_request' ? [text('method'), text('path'), text('status')].filter((part) => part !== '').join(' ') : kind === 'icmp_drop' ? `${text('count')} packets` : '';
  return { kind, action: text('action'), host: text('host') || text('ip'), port: text('port'), request, reason: text('reason') };
}

const KINDS: Array<[Kind | '', string]> = [
  ['', 'Any kind'],
  ['http_request', 'HTTP request'],
  ['tcp_connection', 'TCP connection'],
  ['icmp_drop', 'ICMP dropped'],
];
const ACTIONS: Array<[string, string]> = [
  ['', 'Allowed or denied'],
  ['allow', 'Allowed'],
  ['deny', 'Denied'],
];

const select = (name: string, options: Array<[string, string]>): HTMLSelectElement => h('select', { name }, options.map(([value, label]) => h('option', { value }, label)));

export function auditsSection(context: RuntimeContext): View {
  const { vessel, runtime } = context;
  const errors = new ErrorBox();
  const kind = select('kind', KINDS);
  const action = select('action', ACTIONS);
  const host = h('input', { type: 'search', name: 'host', autocomplete: 'off', spellcheck: 'false' });
  const live = h('input', { type: 'checkbox', checked: true });
  const refresh = h('button', { type: 'button', class: 'secondary' }, 'Refresh');
  const list = table('', ['Time', 'Kind', 'Decision', 'Host', 'Port', 'Request', 'Reason']);
  let audits: Audit[] = [];

  const draw = (): void => {
    const needle = host.value.trim().toLowerCase();
    const shown = audits
      .map((audit) => ({ audit, decision: decisionOf(audit) }))
      .filter(({ decision }) => (kind.value === '' || decision.kind === kind.value) && (action.value === '' || decision.action === action.value) && decision.host.toLowerCase().includes(needle));
    list.caption.textContent = `${shown.length} of the newest ${audits.length} audits of ${runtime.name}`;
    fill(
      list.body,
      shown.length === 0
        ? h('tr', {}, h('td', { colspan: 7, class: 'empty' }, audits.length === 0 ? 'No audits yet.' : 'No audit matches the filters.'))
        : shown.map(({ audit, decision }) =>
            h(
              'tr',
              { 'data-action': decision.action },
              h('td', {}, time(audit.created_at)),
              h('td', {}, decision.kind),
              h('td', {}, h('span', { class: `decision ${decision.action}` }, decision.action)),
              h('td', {}, decision.host),
              h('td', {}, decision.port),
              h('td', {}, decision.request),
              h('td', {}, decision.reason),
            ),
          ),
    );
  };

  const load = async (signal: AbortSignal): Promise<void> => {
    try {
      const first = await vessel.audits.list({ runtime: runtime.id, category: 'egress', limit: FETCHED, signal }).pages().next();
      audits = first.done === true ? [] : first.value.data;
      errors.clear();
      draw();
    } catch (error) {
      if (!signal.aborted) errors.show(error, 'Could not list the audits');
      throw error;
    }
  };

  let poller: Poller | null = null;
  const setLive = (): void => {
    poller?.stop();
    poller = live.checked ? poll(load) : null;
  };
  live.addEventListener('change', setLive);
  refresh.addEventListener('click', () => (poller === null ? void load(new AbortController().signal).catch(() => undefined) : poller.now()));
  for (const control of [kind, action, host]) control.addEventListener('input', draw);
  setLive();

  const filters = h(
    'form',
    { class: 'row filters', role: 'search', 'aria-label': 'Filter audits' },
    field('Kind', kind),
    field('Decision', action),
    field('Host contains', host),
    field('Live', live, 'Looks again every few seconds.'),
    h('div', { class: 'actions' }, refresh),
  );
  filters.addEventListener('submit', (event) => event.preventDefault());
  const element = h('section', { class: 'audits' }, h('h2', {}, 'Audits'), filters, errors.element, list.element);
  return { element, dispose: () => poller?.stop() };
}
