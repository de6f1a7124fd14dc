/**
 * E2B's sandboxes as Vessel's runtimes (docs/e2b.md, "How E2B's concepts map"): the create body
 * as a runtime create, a runtime as E2B's Sandbox, ListedSandbox and SandboxDetail, and the list
 * query as a runtime filter. Pure functions: the routes (control-plane.ts) call the core.
 */
import { randomBytes } from 'node:crypto';
import { invalidArgument } from '../core/errors.js';
import type { RuntimeCreateInput } from '../core/runtimes.js';
import type { Runtime, RuntimeFilter, RuntimeStatus } from '../core/types.js';

/** The template name E2B's SDK sends when the user names none; it names Vessel's default template. */
export const DEFAULT_TEMPLATE = 'base';
/**
 * The envd version Vessel's facade answers as. The SDK gates features on it: from 0.4.0 it sends
 * no user unless asked (the facade's default applies), and a version is what it checks first.
 */
export const ENVD_VERSION = '0.5.7';
/** What E2B's create takes when no timeout is given (NewSandbox's default in E2B's spec v2). */
export const DEFAULT_TIMEOUT_SECS = 300;
/** The timeout E2B's legacy resume sets when it is given none (ResumedSandbox's default). */
export const RESUME_TIMEOUT_SECS = 15;
/** E2B's shortest keep-alive: a refresh asks for at least this long (its sandbox timeout default). */
export const REFRESH_MIN_SECS = 15;
/** E2B's longest sandbox life (24 h), and so the longest timeout taken. */
export const MAX_TIMEOUT_SECS = 24 * 3600;

export type SandboxState = 'running' | 'paused';

/** E2B's two states; a runtime in any other status (creating, error, crashed...) is not a sandbox E2B lists. */
export function stateOf(status: RuntimeStatus): SandboxState | null {
  switch (status) {
    case 'running':
      return 'running';
    case 'paused':
    case 'suspended':
    case 'shutdown':
      return 'paused';
    default:
      return null;
  }
}

/** The body of E2B's POST /sandboxes and /v2/sandboxes, as far as Vessel serves it. */
export interface NewSandbox {
  templateID: string;
  timeout?: number | undefined;
  metadata?: Record<string, string> | undefined;
  envVars?: Record<string, string> | undefined;
  autoPause?: boolean | undefined;
  allow_internet_access?: boolean | undefined;
  network?: unknown;
  mcp?: unknown;
}

/**
 * A runtime create from E2B's. The timeout is the runtime's idle timeout: at it the runtime is
 * stopped (or suspended, with autoPause) and, when stopped, deleted at once, as E2B kills it.
 */
export function createInputOf(body: NewSandbox): RuntimeCreateInput {
  if (body.templateID !== DEFAULT_TEMPLATE) {
    throw invalidArgument(`template '${body.templateID}' is not served: this Vessel serves E2B's default template '${DEFAULT_TEMPLATE}' only (docs/e2b.md)`);
  }
  // What would change the sandbox's network or what runs in it is refused rather than ignored.
  if (body.allow_internet_access === false || (body.network !== undefined && body.network !== null)) {
    throw invalidArgument('network settings at create are not served yet: set the runtime\'s egress policy on Vessel\'s API (docs/e2b.md)');
  }
  if (body.mcp !== undefined && body.mcp !== null) throw invalidArgument('MCP gateways are not served (docs/e2b.md)');
  return {
    display_name: `e2b-${randomBytes(6).toString('hex')}`,
    labels: body.metadata ?? {},
    // The runtime's environment: every command's, under the command's own envs, as envd's.
    env: body.envVars ?? {},
    lifecycle: lifecycleOf(body.timeout ?? DEFAULT_TIMEOUT_SECS, body.autoPause ?? false),
  };
}

export function lifecycleOf(timeoutSecs: number, autoPause: boolean): NonNullable<RuntimeCreateInput['lifecycle']> {
  return autoPause
    ? { idle_timeout_secs: timeoutSecs, on_idle: 'suspend', auto_delete_secs: null }
    : { idle_timeout_secs: timeoutSecs, on_idle: 'stop', auto_delete_secs: 0 };
}

/** E2B's Sandbox: what create and connect answer. `envdAccessToken` is the caller's own key (docs/e2b.md). */
export function sandboxOf(rt: Runtime, envdAccessToken: string) {
  return {
    sandboxID: rt.id,
    templateID: DEFAULT_TEMPLATE,
    alias: DEFAULT_TEMPLATE,
    clientID: rt.node ?? 'vessel',
    envdVersion: ENVD_VERSION,
    envdAccessToken,
    domain: null,
  };
}

/** When the idle timeout would end the sandbox if nothing happened from its last change on. */
function endAtOf(rt: Runtime): string {
  const secs = rt.lifecycle.idleTimeoutSecs;
  if (secs === null || secs === 0) return new Date(Date.parse(rt.updatedAt) + MAX_TIMEOUT_SECS * 1000).toISOString();
  return new Date(Date.parse(rt.updatedAt) + secs * 1000).toISOString();
}

/** E2B's ListedSandbox; null for a runtime E2B has no state for. */
export function listedSandboxOf(rt: Runtime) {
  const state = stateOf(rt.status);
  return state === null ? null : describe(rt, state);
}

/** E2B's SandboxDetail, for a runtime in any status: one E2B has no state for is shown paused (not running). */
export function sandboxDetailOf(rt: Runtime) {
  return { ...describe(rt, stateOf(rt.status) ?? 'paused'), domain: null };
}

function describe(rt: Runtime, state: SandboxState) {
  return {
    sandboxID: rt.id,
    templateID: DEFAULT_TEMPLATE,
    alias: DEFAULT_TEMPLATE,
    clientID: rt.node ?? 'vessel',
    cpuCount: rt.resources.vcpus,
    memoryMB: rt.resources.limits.memory_mib,
    diskSizeMB: 0,
    envdVersion: ENVD_VERSION,
    metadata: rt.labels,
    startedAt: rt.createdAt,
    endAt: endAtOf(rt),
    state,
  };
}

/**
 * The list filter of E2B's `metadata` query ("k=v&k2=v2", each key and value URL-encoded once
 * more by the SDK) and `state` (comma list).
 */
export function filterOf(metadata: string | undefined, state: string | undefined, defaultStates: readonly SandboxState[]): { filter: RuntimeFilter; states: Set<SandboxState> } {
  const labels: Array<[string, string | null]> = [];
  if (metadata !== undefined && metadata !== '') {
    for (const [key, value] of new URLSearchParams(metadata)) labels.push([decode(key), decode(value)]);
  }
  const states = new Set<SandboxState>();
  for (const s of state === undefined || state === '' ? defaultStates : state.split(',')) {
    if (s !== 'running' && s !== 'paused') throw invalidArgument(`state '${s.slice(0, 20)}' is not one of running, paused`);
    states.add(s);
  }
  const statuses: RuntimeStatus[] = [];
  if (states.has('running')) statuses.push('running');
  if (states.has('paused')) statuses.push('paused', 'suspended', 'shutdown');
  return { filter: { labels, statuses }, states };
}

function decode(s: string): string {
  try {
    return decodeURIComponent(s);
  } catch {
    throw invalidArgument('metadata query is not URL-encoded');
  }
}
