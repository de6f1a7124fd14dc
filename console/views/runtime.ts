/**
 * One runtime's page: its name, live status and lifecycle buttons above, and one section below
 * (terminal, files, exec, egress, ingress, audits, checkpoints). The header and its poll stay
 * while the sections change, so the status never blinks; each section is a view of its own that
 * is disposed when another is shown (a terminal's socket closes with it).
 */
import type { Runtime, RuntimeInfo, Vessel } from 'vessel/client';
import { ErrorBox, announce, confirmed, fill, formatBytes, h, setAvailable, whileBusy } from '../dom.js';
import { poll } from '../poll.js';
import { RUNTIME_SECTIONS, go, href, type RuntimeSection } from '../router.js';
import type { RuntimeContext, View } from '../view.js';
import { auditsSection } from './audits.js';
import { checkpointsSection } from './checkpoints.js';
import { egressSection } from './egress.js';
import { execSection } from './exec.js';
import { filesSection } from './files.js';
import { ingressSection } from './ingress.js';
import { statusBadge } from './status.js';
import { terminalSection } from './terminal.js';

const SECTIONS: Record<RuntimeSection, { label: string; view: (context: RuntimeContext) => View }> = {
  terminal: { label: 'Terminal', view: terminalSection },
  files: { label: 'Files', view: filesSection },
  exec: { label: 'Exec', view: execSection },
  egress: { label: 'Egress', view: egressSection },
  ingress: { label: 'Ingress', view: ingressSection },
  audits: { label: 'Audits', view: auditsSection },
  checkpoints: { label: 'Checkpoints', view: checkpointsSection },
};

type Lifecycle = 'start' | 'stop' | 'pause' | 'resume';

/** The states each operation starts from (docs/api.md, "Lifecycle"): other buttons are disabled. */
const ALLOWED_FROM: Record<Lifecycle, Array<RuntimeInfo['status']>> = {
  start: ['shutdown', 'crashed', 'suspended'],
  stop: ['running', 'paused'],
  pause: ['running'],
  resume: ['paused', 'suspended'],
};

export interface RuntimePage extends View {
  readonly runtimeName: string;
  showSection(section: RuntimeSection): void;
}

export function runtimePage(vessel: Vessel, name: string, initial: RuntimeSection): RuntimePage {
  const errors = new ErrorBox();
  const badge = h('span', { class: 'badge-slot' });
  const facts = h('p', { class: 'facts' });
  const lifecycle = Object.fromEntries(
    (['start', 'stop', 'pause', 'resume'] as const).map((op) => [op, h('button', { type: 'button', class: 'secondary', 'aria-disabled': 'true' }, op[0]!.toUpperCase() + op.slice(1))]),
  ) as Record<Lifecycle, HTMLButtonElement>;
  const remove = h('button', { type: 'button', class: 'danger', 'aria-disabled': 'true' }, 'Delete');
  const links = new Map<RuntimeSection, HTMLAnchorElement>();
  const sectionNav = h(
    'nav',
    { class: 'tabs', 'aria-label': 'Runtime sections' },
    h(
      'ul',
      {},
      RUNTIME_SECTIONS.map((section) => {
        const link = h('a', { href: href({ view: 'runtime', runtime: name, section }) }, SECTIONS[section].label);
        links.set(section, link);
        return h('li', {}, link);
      }),
    ),
  );
  const panel = h('div', { class: 'panel' }, h('p', { class: 'empty' }, 'Loading…'));
  const element = h(
    'section',
    { class: 'runtime-page' },
    h('div', { class: 'page-head' }, h('div', {}, h('h1', {}, name, ' ', badge), facts), h('div', { class: 'actions', role: 'group', 'aria-label': 'Lifecycle' }, Object.values(lifecycle), remove)),
    errors.element,
    sectionNav,
    panel,
  );

  let runtime: Runtime | null = null;
  let section: RuntimeSection = initial;
  let current: View | null = null;
  const listeners = new Set<(runtime: Runtime) => void>();

  const showInfo = (info: RuntimeInfo): void => {
    fill(badge, statusBadge(info.status, info.status_message));
    const memory = formatBytes(info.resources.limits.memory_mib * 1024 * 1024);
    const pending = info.pending_resources === undefined ? '' : ` (${formatBytes(info.pending_resources.limits.memory_mib * 1024 * 1024)} at the next start)`;
    facts.textContent = `${info.resources.vcpus} vCPU · ${memory} memory${pending} · id ${info.id}`;
    for (const [op, button] of Object.entries(lifecycle) as Array<[Lifecycle, HTMLButtonElement]>) {
      if (button.getAttribute('aria-busy') !== 'true') setAvailable(button, ALLOWED_FROM[op].includes(info.status));
    }
    if (remove.getAttribute('aria-busy') !== 'true') setAvailable(remove, true);
  };
  const updated = (): void => {
    if (runtime === null) return;
    showInfo(runtime.info);
    for (const listener of listeners) listener(runtime);
  };

  const context = (rt: Runtime): RuntimeContext => ({
    vessel,
    runtime: rt,
    onUpdate(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    async refresh() {
      await rt.refresh();
      updated();
    },
  });

  const mount = (focus: boolean): void => {
    for (const [s, link] of links) {
      if (s === section) link.setAttribute('aria-current', 'page');
      else link.removeAttribute('aria-current');
    }
    if (runtime === null) return;
    current?.dispose();
    listeners.clear();
    current = SECTIONS[section].view(context(runtime));
    panel.replaceChildren(current.element);
    const heading = panel.querySelector<HTMLElement>('h2');
    if (focus && heading !== null) {
      heading.tabIndex = -1;
      heading.focus();
    }
  };

  const poller = poll(async (signal) => {
    try {
      if (runtime === null) {
        runtime = await vessel.runtimes.get(name, { signal });
        mount(false);
      } else {
        await runtime.refresh({ signal });
      }
      errors.clear();
      updated();
    } catch (error) {
      if (!signal.aborted) errors.show(error, runtime === null ? `Could not open runtime '${name}'` : 'Could not refresh the status');
      throw error;
    }
  });

  for (const [op, button] of Object.entries(lifecycle) as Array<[Lifecycle, HTMLButtonElement]>) {
    button.addEventListener('click', () => {
      if (runtime === null) return;
      const rt = runtime;
      void whileBusy(button, errors, `Could not ${op} ${name}`, async () => {
        await rt[op]();
        announce(`${name} is ${rt.status}.`);
      }).then(updated);
    });
  }
  remove.addEventListener('click', () => {
    if (runtime === null || !confirmed(`Delete runtime '${name}'? Its VM, disk and rules go with it.`)) return;
    const rt = runtime;
    void whileBusy(remove, errors, `Could not delete ${name}`, async () => {
      await rt.delete();
      announce(`${name} deleted.`);
      go({ view: 'runtimes' });
    });
  });

  mount(false);
  return {
    element,
    runtimeName: name,
    showSection(next) {
      section = next;
      mount(true);
    },
    dispose() {
      poller.stop();
      current?.dispose();
    },
  };
}
