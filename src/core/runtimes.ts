/** Runtime domain rules: creation, the lifecycle state machine, resources, activity. Exec is processes.ts, files files.ts. */
import { randomUUID } from 'node:crypto';
import { VesselError, failedPrecondition, invalidArgument, notFound, unavailable } from './errors.js';
import { normalizeHostPattern } from './host-pattern.js';
import { KeyedMutex } from './keyed-mutex.js';
import { LIVE_STATUSES, RESULT_OF, STOPPED_STATUSES, requireState, type LifecycleOp } from './lifecycle.js';
import { LIFECYCLE_TICK_MS, dueAction, type TimerAction } from './lifecycle-timers.js';
import { checkDisplayName } from './names.js';
import type { HostLimits, Machines, Store, VmSpec } from './ports.js';
import type { AuditService } from './audits.js';
import type { TenantQuotas } from './quotas.js';
import { checkEnv, checkLabels, initialLifecycle, mergeLifecycle, type LifecycleInput } from './runtime-settings.js';
import type { Checkpoint, EgressPolicy, IngressSpec, Page, PageRequest, Resources, Runtime, RuntimeFilter, Template } from './types.js';
import type { WarmPool } from './warm-pool.js';

export const DEFAULT_MEMORY_MIB = 512;
export const MAX_ALLOWED_HOSTS = 128;
export const STOP_DEADLINE_MS = 10_000;
/** A runtime's status message while it moves to another VM host (runtime-moves.ts); the host's name follows. */
export const MOVING_MESSAGE = 'moving to VM host';

/**
 * An `updated_at` later than `previous`, even within its millisecond: a move's compare-and-swap
 * (Store.runtimes.handOver) expects one value, and a swap that wrote the same value would pass.
 */
export const stampAfter = (previous: string): string => new Date(Math.max(Date.now(), Date.parse(previous) + 1)).toISOString();

export interface RuntimeCreateInput {
  display_name: string;
  resources?: { limits?: { memory_mib: number }; requests?: { memory_mib?: number }; vcpus?: number };
  egress_policy?: EgressPolicy;
  ingress_specs?: IngressSpec[];
  checkpoint?: string;
  /** A ready template of the tenant's (id or name) to boot from, instead of the built-in image. */
  template?: string;
  labels?: Record<string, string>;
  /** Every exec, process and terminal gets these, over its template's and under its own. */
  env?: Record<string, string>;
  lifecycle?: LifecycleInput;
}

export interface RuntimePatchInput {
  egress_policy?: EgressPolicy;
  resources?: { limits?: { memory_mib: number }; requests?: { memory_mib?: number } };
  /** Replaces every label; `{}` removes them all. */
  labels?: Record<string, string>;
  /** Each field given replaces the one in force; the others stay. */
  lifecycle?: LifecycleInput;
}

/** The checkpoint service, as creates see it. */
export interface CreateCheckpoints {
  /** The system checkpoint of this shape, made on first use. */
  systemFor(resources: Resources): Promise<{ id: string }>;
  /** Resolves when the checkpoint's files are as they were at capture; throws failed_precondition otherwise. */
  ensureIntact(checkpoint: Checkpoint): Promise<void>;
}

/** Hooks for other parts of the service that must follow runtime changes (the egress gateway). */
export interface RuntimeObserver {
  /** Resolves once the new policy is in force. */
  policyChanged(runtime: Runtime): Promise<void>;
}

/** Gives runtimes their network (the core's EgressService over the gateway). */
export interface RuntimeNetwork {
  /** Returns the TAP for the VM's NIC. */
  attach(rt: Runtime): Promise<string>;
  detach(runtimeId: string): Promise<void>;
}

export interface Logger {
  info(obj: object, msg: string): void;
  warn(obj: object, msg: string): void;
  error(obj: object, msg: string): void;
}

/**
 * Requests within limits, and no VM larger than the host could ever run: the schema keeps the
 * spec's ranges (vcpus up to 2^31-1, memory up to 2^64), which no host has.
 */
function checkResources(r: Resources, host: HostLimits): Resources {
  if (r.vcpus > host.vcpus) throw invalidArgument(`resources.vcpus ${r.vcpus} is more than this host's ${host.vcpus} CPUs`);
  if (r.limits.memory_mib > host.memoryMib) {
    throw invalidArgument(`resources.limits.memory_mib ${r.limits.memory_mib} is more than this host's ${host.memoryMib} MiB`);
  }
  if (r.requests.memory_mib > r.limits.memory_mib) {
    throw invalidArgument(
      `resources.requests.memory_mib (${r.requests.memory_mib}) must not exceed resources.limits.memory_mib (${r.limits.memory_mib})`,
    );
  }
  return r;
}

export function normalizeEgressPolicy(policy: EgressPolicy): EgressPolicy {
  if (policy.allowed_hosts.length > MAX_ALLOWED_HOSTS) {
    throw invalidArgument(`egress_policy.allowed_hosts has at most ${MAX_ALLOWED_HOSTS} items`);
  }
  return { enabled: policy.enabled, allowed_hosts: [...new Set(policy.allowed_hosts.map(normalizeHostPattern))] };
}

function checkIngress(specs: IngressSpec[]): IngressSpec[] {
  const ports = new Set<number>();
  for (const s of specs) {
    if (s.runtime_port < 1) throw invalidArgument('ingress_specs[].runtime_port must be between 1 and 65535');
    if (ports.has(s.runtime_port)) throw invalidArgument(`ingress_specs has port ${s.runtime_port} more than once`);
    ports.add(s.runtime_port);
  }
  return specs;
}

export class RuntimeService {
  readonly #lock = new KeyedMutex();
  /** Last exec, file or egress activity per runtime, for idle suspension. */
  readonly #activity = new Map<string, number>();
  /** Work in progress per runtime: while any runs, the runtime is not idle. */
  readonly #inFlight = new Map<string, number>();
  #lifecycleTimer: NodeJS.Timeout | null = null;
  /** VESSEL_IDLE_SUSPEND_SECS: the idle timeout of runtimes that set none; 0 is never. */
  #defaultIdleSecs = 0;
  /** A sweep of the timers is under way: the next tick skips rather than pile up behind a slow one. */
  #sweeping = false;
  #observer: RuntimeObserver | null = null;
  /** Runtimes on their way to another VM host (runtime-moves.ts), by the host they go to. */
  readonly #moving = new Map<string, string>();

  constructor(
    private readonly store: Store,
    private readonly machines: Machines,
    private readonly network: RuntimeNetwork,
    private readonly quotas: TenantQuotas,
    /** Where what the lifecycle timers do is recorded for the tenant to see. */
    private readonly audits: Pick<AuditService, 'record'>,
    private readonly log: Logger,
    private readonly pool: Pick<WarmPool, 'take' | 'discard'> | null = null,
    /** The VM host this process is (docs/scaling.md); null on a single host. It runs only its own runtimes. */
    private readonly node: string | null = null,
  ) {
    machines.onUnexpectedExit((id) => void this.#markCrashed(id));
  }

  observe(observer: RuntimeObserver): void {
    this.#observer = observer;
  }

  #checkpoints: CreateCheckpoints | null = null;

  /** Where creates get their checkpoints checked, and plain creates their template (the checkpoint service). */
  useCheckpoints(source: CreateCheckpoints): void {
    this.#checkpoints = source;
  }

  async get(tenantId: string, ref: string): Promise<Runtime> {
    const rt = await this.store.runtimes.find(tenantId, ref);
    if (rt === undefined) throw notFound('runtime', ref);
    // A VM host acts only on its own: a name an API node routed here may since name a runtime
    // on another host (deleted and made again), and a retry is routed afresh.
    if (this.node !== null && rt.node !== this.node) {
      throw new VesselError('unavailable', `runtime '${rt.displayName}' is not on this VM host; retry`, { retryAfterSecs: 1 });
    }
    const to = this.#moving.get(rt.id);
    if (to !== undefined) throw new VesselError('unavailable', `runtime '${rt.displayName}' is moving to VM host '${to}'; retry`, { retryAfterSecs: 2 });
    return rt;
  }

  list = (tenantId: string, page: PageRequest, filter: RuntimeFilter = { labels: [], statuses: [] }): Promise<Page<Runtime>> =>
    this.store.runtimes.listMatching(tenantId, filter, page);

  async create(tenantId: string, input: RuntimeCreateInput): Promise<Runtime> {
    this.#requireDriver();
    // All input, and the tenant's quota, is checked before anything costly (a system template
    // boot, a check of a checkpoint's files) happens.
    const name = checkDisplayName(input.display_name);
    const egressPolicy = normalizeEgressPolicy(input.egress_policy ?? { enabled: true, allowed_hosts: [] });
    const ingressSpecs = checkIngress(input.ingress_specs ?? []);
    const labels = checkLabels(input.labels ?? {});
    const env = checkEnv(input.env ?? {});
    const lifecycle = initialLifecycle(input.lifecycle);
    if (input.checkpoint !== undefined && input.template !== undefined) throw invalidArgument('give checkpoint or template, not both: a fork keeps the template of its checkpoint');
    const template = input.template === undefined ? null : await this.#templateOf(tenantId, input.template);
    // A Dockerfile's template is the checkpoint of its last build step: its runtimes are forks of it.
    const forkRef = input.checkpoint ?? template?.checkpointId ?? undefined;
    const fork = forkRef === undefined ? null : await this.#forkOf(tenantId, forkRef, input.resources);
    const resources = fork?.resources ?? this.#resourcesFromInput(input.resources);
    const claim = await this.quotas.claimVm(tenantId, { runtimeName: name, resources, newRuntime: true, replacing: null });
    let runtime: Runtime;
    try {
      if (fork !== null) await this.#checkpoints?.ensureIntact(fork.checkpoint);
      // An image's template boots afresh on its disk: no system checkpoint or warm pool of its own yet (docs/templates.md).
      const { baseCheckpointId, spareId } =
        fork !== null ? { baseCheckpointId: fork.checkpoint.id, spareId: null } : template !== null ? { baseCheckpointId: null, spareId: null } : await this.#template(resources);
      const now = new Date().toISOString();
      runtime = {
        // A spare from the warm pool already runs under the id it was made for.
        id: spareId ?? randomUUID(),
        tenantId,
        displayName: name,
        status: 'creating',
        statusMessage: null,
        egressPolicy,
        ingressSpecs,
        resources,
        pendingResources: null,
        baseCheckpointId,
        templateId: template?.id ?? fork?.checkpoint.templateId ?? null,
        node: this.node,
        labels,
        env,
        lifecycle,
        stoppedAt: null,
        createdAt: now,
        updatedAt: now,
      };
      try {
        // From here the record, `creating`, holds the VM against the quota.
        await claim.commit(() => this.store.runtimes.insert(runtime));
      } catch (err) {
        // A duplicate name, say: the spare taken for it goes, rather than run unowned.
        if (spareId !== null) await this.pool?.discard(spareId);
        throw err;
      }
    } finally {
      claim.release();
    }
    return this.#lock.run(runtime.id, async () => {
      try {
        await this.machines.create(this.#spec(runtime, await this.network.attach(runtime)));
      } catch (err) {
        await this.machines.destroy(runtime.id).catch(() => undefined);
        await this.network.detach(runtime.id).catch(() => undefined);
        if (err instanceof VesselError && err.code !== 'internal') {
          // Refusals (capacity, unsupported, bad input) leave nothing behind, not even the record.
          await this.store.runtimes.delete(tenantId, runtime.id);
          throw err;
        }
        const reason = err instanceof Error ? err.message : String(err);
        await this.#save(runtime, { status: 'error', statusMessage: `boot failed: ${reason}` });
        this.log.error({ runtimeId: runtime.id, err }, 'runtime boot failed');
        throw unavailable(`runtime '${name}' failed to boot: ${reason}`);
      }
      return this.#save(runtime, { status: 'running' });
    });
  }

  async patch(tenantId: string, ref: string, input: RuntimePatchInput): Promise<Runtime> {
    const found = await this.get(tenantId, ref);
    return this.#lock.run(found.id, async () => {
      const rt = await this.get(tenantId, found.id);
      const changes: Partial<Runtime> = {};
      if (input.egress_policy !== undefined) changes.egressPolicy = normalizeEgressPolicy(input.egress_policy);
      if (input.labels !== undefined) changes.labels = checkLabels(input.labels);
      if (input.lifecycle !== undefined) {
        changes.lifecycle = mergeLifecycle(rt.lifecycle, input.lifecycle);
        // A runtime stopped long ago is not deleted the moment auto-delete is set: its clock starts now.
        if (input.lifecycle.auto_delete_secs !== undefined && rt.stoppedAt !== null) changes.stoppedAt = new Date().toISOString();
      }
      if (input.resources !== undefined) {
        const target = checkResources(
          {
            vcpus: rt.resources.vcpus,
            limits: { memory_mib: input.resources.limits?.memory_mib ?? (rt.pendingResources ?? rt.resources).limits.memory_mib },
            requests: { memory_mib: input.resources.requests?.memory_mib ?? rt.resources.requests.memory_mib },
          },
          this.machines.hostLimits(),
        );
        const next = rt.pendingResources ?? rt.resources;
        if (target.limits.memory_mib > next.limits.memory_mib) {
          // A resize holds nothing more until the next start, which claims the VM again; this
          // refuses now a size the tenant could not run beside what it holds.
          const holdsVm = LIVE_STATUSES.includes(rt.status);
          const replacing = holdsVm ? rt.resources : null;
          (await this.quotas.claimVm(tenantId, { runtimeName: rt.displayName, resources: target, newRuntime: false, replacing })).release();
        }
        const live = rt.status === 'running' || rt.status === 'paused';
        if (live && target.requests.memory_mib !== rt.resources.requests.memory_mib) {
          // Fits inside the limit in force now; a larger request waits for the limit to grow at the next start.
          const inForce = Math.min(target.requests.memory_mib, rt.resources.limits.memory_mib);
          await this.machines.setMemoryTarget(rt.id, inForce);
        }
        if (live && target.limits.memory_mib !== rt.resources.limits.memory_mib) {
          // The limit is the VM's RAM size: it changes at the next boot, and until then the Runtime shows what is in force.
          changes.pendingResources = target;
          changes.resources = { ...rt.resources, requests: { memory_mib: Math.min(target.requests.memory_mib, rt.resources.limits.memory_mib) } };
        } else {
          changes.resources = target;
          changes.pendingResources = null;
        }
      }
      const saved = await this.#save(rt, changes);
      if (changes.egressPolicy !== undefined) await this.#observer?.policyChanged(saved);
      return saved;
    });
  }

  async lifecycle(tenantId: string, ref: string, op: LifecycleOp): Promise<Runtime> {
    const found = await this.get(tenantId, ref);
    return this.#lock.run(found.id, async () => {
      const rt = await this.get(tenantId, found.id);
      requireState(op, rt.status, rt.displayName);
      if (op !== 'stop') this.#requireDriver();
      switch (op) {
        case 'pause':
          await this.machines.pause(rt.id);
          break;
        case 'resume':
          if (rt.status === 'suspended') return this.#boot(rt);
          await this.machines.resume(rt.id);
          // Time spent paused is not idle time: the idle timer starts again.
          this.touch(rt.id);
          break;
        case 'suspend':
          await this.machines.suspend(rt.id);
          break;
        case 'stop':
          await this.machines.stop(rt.id, STOP_DEADLINE_MS);
          break;
        case 'start':
          return this.#boot(rt);
      }
      return this.#save(rt, { status: RESULT_OF[op], statusMessage: null });
    });
  }

  async delete(tenantId: string, ref: string): Promise<void> {
    const found = await this.get(tenantId, ref);
    await this.#lock.run(found.id, async () => {
      const rt = await this.get(tenantId, found.id);
      await this.#save(rt, { status: 'deleting' });
      await this.#finishDelete(rt);
    });
  }

  /** Counts as activity from start to end, so a long command does not look idle. */
  async busy<T>(runtimeId: string, work: () => Promise<T>): Promise<T> {
    const release = this.hold(runtimeId);
    try {
      return await work();
    } finally {
      release();
    }
  }

  /**
   * Marks work in progress (a command, a stream, a terminal): the runtime is not idle until the
   * returned release is called, however long that takes. Releasing twice is harmless.
   */
  hold(runtimeId: string): () => void {
    this.touch(runtimeId);
    this.#inFlight.set(runtimeId, (this.#inFlight.get(runtimeId) ?? 0) + 1);
    let held = true;
    return () => {
      if (!held) return;
      held = false;
      if (this.#activity.has(runtimeId)) this.touch(runtimeId); // not for a runtime deleted meanwhile
      const left = (this.#inFlight.get(runtimeId) ?? 1) - 1;
      if (left > 0) this.#inFlight.set(runtimeId, left);
      else this.#inFlight.delete(runtimeId);
    };
  }

  /** Marks activity (exec, files, egress) so an idle timer does not stop a busy runtime. */
  touch(runtimeId: string): void {
    this.#activity.set(runtimeId, Date.now());
  }

  /**
   * Runs every runtime's lifecycle timers (lifecycle-timers.ts) each LIFECYCLE_TICK_MS.
   * `defaultIdleSecs` is the idle timeout of runtimes that set none (0: never).
   */
  startLifecycleTimers(defaultIdleSecs: number): void {
    this.#defaultIdleSecs = defaultIdleSecs;
    if (this.#lifecycleTimer !== null) return;
    this.#lifecycleTimer = setInterval(() => void this.runLifecycleTimers().catch((err: unknown) => this.log.error({ err }, 'lifecycle timers failed')), LIFECYCLE_TICK_MS);
    this.#lifecycleTimer.unref();
  }

  stopLifecycleTimers(): void {
    if (this.#lifecycleTimer !== null) clearInterval(this.#lifecycleTimer);
    this.#lifecycleTimer = null;
  }

  /**
   * One sweep at `now`: the due actions are taken, each under its runtime's lock after deciding
   * again on the record as it is then (a PATCH, a start or new work may have come first). A
   * running runtime first seen (after a restart) counts as active from now: activity is kept in
   * memory, and a VM the service could not reach meanwhile may well have been used.
   */
  async runLifecycleTimers(now = Date.now()): Promise<void> {
    if (this.#sweeping) return;
    this.#sweeping = true;
    try {
      const due: Runtime[] = [];
      for (const rt of await this.store.runtimes.listTimed(this.node)) {
        // A moving runtime holds its lock for the whole copy: waiting on it would stall every timer.
        if (this.#moving.has(rt.id)) continue;
        if (rt.status === 'running' && !this.#activity.has(rt.id)) this.#activity.set(rt.id, now);
        else if (dueAction(rt, this.#activityOf(rt.id), now, this.#defaultIdleSecs) !== null) due.push(rt);
      }
      await Promise.all(due.map((rt) => this.#lock.run(rt.id, () => this.#expire(rt.id, now))));
    } finally {
      this.#sweeping = false;
    }
  }

  #activityOf(runtimeId: string) {
    return { busy: this.#inFlight.has(runtimeId), lastAt: this.#activity.get(runtimeId) ?? 0 };
  }

  /** With the runtime's lock held: takes the action its timers call for now, if any still does. */
  async #expire(runtimeId: string, now: number): Promise<void> {
    const rt = await this.store.runtimes.findById(runtimeId);
    // Moved to another host while this sweep waited for its lock: that host times it now.
    if (rt === undefined || rt.node !== this.node) return;
    const due = dueAction(rt, this.#activityOf(rt.id), now, this.#defaultIdleSecs);
    if (due === null) return;
    try {
      await this.#act(rt, due);
    } catch (err) {
      this.log.warn({ runtimeId: rt.id, tenantId: rt.tenantId, action: due.action, err }, 'a lifecycle timer could not act on a runtime');
      return;
    }
    this.log.info({ runtimeId: rt.id, tenantId: rt.tenantId, runtime: rt.displayName, action: due.action, reason: due.reason }, 'lifecycle timer acted on a runtime');
    const lifecycle = { action: due.action, reason: due.reason, runtime_name: rt.displayName };
    await this.audits.record([{ id: randomUUID(), tenantId: rt.tenantId, runtimeId: rt.id, category: 'lifecycle', payload: { lifecycle }, createdAt: new Date().toISOString() }]);
  }

  async #act(rt: Runtime, due: TimerAction): Promise<void> {
    switch (due.action) {
      case 'suspend':
        await this.machines.suspend(rt.id);
        await this.#save(rt, { status: 'suspended', statusMessage: due.reason });
        return;
      case 'stop':
        await this.machines.stop(rt.id, STOP_DEADLINE_MS);
        await this.#save(rt, { status: 'shutdown', statusMessage: due.reason });
        return;
      case 'delete':
        await this.#save(rt, { status: 'deleting' });
        await this.#finishDelete(rt);
        return;
    }
  }

  /** Runs the work with this runtime's lifecycle lock held (used by checkpoint capture). */
  withLock<T>(runtimeId: string, work: () => Promise<T>): Promise<T> {
    return this.#lock.run(runtimeId, work);
  }

  /**
   * Runs a move of the runtime to VM host `to` with its lock held; meanwhile every call for it
   * here is told to retry, and after it the API nodes route them to wherever it then is.
   */
  whileMoving<T>(runtimeId: string, to: string, work: () => Promise<T>): Promise<T> {
    return this.#lock.run(runtimeId, async () => {
      this.#moving.set(runtimeId, to);
      try {
        return await work();
      } finally {
        this.#moving.delete(runtimeId);
      }
    });
  }

  /**
   * At start-up: find every VM the store believes is alive. One that still runs is adopted;
   * one that is gone is crashed; a delete or create that was cut short is finished or failed.
   */
  async reconcile(): Promise<{ adopted: number; crashed: number; orphans: number }> {
    let adopted = 0;
    let crashed = 0;
    const all = (await this.store.runtimes.listAll()).filter((rt) => rt.node === this.node);
    const movedAway = new Set<string>();
    for (const rt of all) {
      if (this.node !== null && rt.statusMessage?.startsWith(MOVING_MESSAGE) === true) {
        // A move cut short by this restart: the store decides where the runtime is, and this
        // compare-and-swap keeps a late commit by the other host from taking it now.
        const stamp = stampAfter(rt.updatedAt);
        if (!(await this.store.runtimes.handOver(rt.id, { node: this.node, updatedAt: rt.updatedAt }, { node: this.node, statusMessage: null, updatedAt: stamp }))) {
          movedAway.add(rt.id);
          continue;
        }
        Object.assign(rt, { statusMessage: null, updatedAt: stamp });
      }
      if (rt.status === 'deleting') {
        await this.#finishDelete(rt);
        continue;
      }
      if (!LIVE_STATUSES.includes(rt.status)) continue;
      let gone = 'the VM process was gone after a service restart';
      const state = await this.machines.reattach(rt.id).catch((err: unknown) => {
        gone = `the VM could not be taken back after a service restart: ${err instanceof Error ? err.message : String(err)}`;
        return 'gone' as const;
      });
      if (state === 'gone' || rt.status === 'creating') {
        if (state !== 'gone') await this.machines.destroy(rt.id).catch(() => undefined);
        const status = rt.status === 'creating' ? 'error' : 'crashed';
        await this.#save(rt, { status, statusMessage: status === 'error' ? 'service restarted during creation' : gone });
        crashed++;
      } else {
        if (rt.status === 'running' && state === 'paused') {
          // Paused behind the store's back: a checkpoint capture was cut short. Put it back.
          await this.machines.resume(rt.id);
        } else if (state !== rt.status) {
          await this.#save(rt, { status: state });
        }
        adopted++;
      }
    }
    // The reverse case: files, maybe a running VM, whose record is gone (lost in a crash between
    // the two, or the store restored from a backup). Nothing owns them; they are removed, loudly.
    const known = new Set(all.filter((rt) => !movedAway.has(rt.id)).map((rt) => rt.id));
    let orphans = 0;
    for (const id of await this.machines.runtimeIds()) {
      if (known.has(id)) continue;
      this.log.warn({ runtimeId: id }, 'a VM with no runtime record was found and removed');
      await this.machines.destroy(id);
      orphans++;
    }
    return { adopted, crashed, orphans };
  }

  async #boot(rt: Runtime): Promise<Runtime> {
    // A suspended VM comes back with the memory it was saved with; pending limits wait for a real boot.
    const resources = rt.status === 'suspended' ? rt.resources : (rt.pendingResources ?? rt.resources);
    const pendingResources = rt.status === 'suspended' ? rt.pendingResources : null;
    const claim = await this.quotas.claimVm(rt.tenantId, { runtimeName: rt.displayName, resources, newRuntime: false, replacing: null });
    try {
      try {
        await this.machines.start(this.#spec({ ...rt, resources }, await this.network.attach(rt)));
      } catch (err) {
        const reason = err instanceof Error ? err.message : String(err);
        if (err instanceof VesselError && err.code === 'unavailable') throw err;
        await this.#save(rt, { status: 'crashed', statusMessage: `start failed: ${reason}` });
        throw unavailable(`runtime '${rt.displayName}' failed to start: ${reason}`);
      }
      this.touch(rt.id);
      return await claim.commit(() => this.#save(rt, { status: 'running', statusMessage: null, resources, pendingResources }));
    } finally {
      claim.release();
    }
  }

  async #finishDelete(rt: Runtime): Promise<void> {
    await this.machines.destroy(rt.id);
    await this.network.detach(rt.id);
    await this.store.rules.deleteForRuntime(rt.id);
    await this.store.runtimes.delete(rt.tenantId, rt.id);
    this.#activity.delete(rt.id);
  }

  async #markCrashed(runtimeId: string): Promise<void> {
    await this.#lock.run(runtimeId, async () => {
      const rt = await this.store.runtimes.findById(runtimeId);
      // A VM that exits here after its runtime moved to another host says nothing of the one there.
      if (rt === undefined || rt.node !== this.node || !(rt.status === 'running' || rt.status === 'paused')) return;
      this.log.warn({ runtimeId }, 'VM process exited unexpectedly; runtime marked crashed');
      await this.#save(rt, { status: 'crashed', statusMessage: 'the VM process exited unexpectedly' });
    });
  }

  /** The ready checkpoint a create forks, and the resources the fork gets: its checkpoint's, with a request of its own. */
  async #forkOf(tenantId: string, ref: string, input: RuntimeCreateInput['resources']): Promise<{ checkpoint: Checkpoint; resources: Resources }> {
    const cp = await this.store.checkpoints.find(tenantId, ref, true);
    if (cp === undefined) throw notFound('checkpoint', ref);
    // API nodes place a fork where its checkpoint's files are; a call that reached another host went around them.
    if (cp.node !== this.node) throw failedPrecondition(`checkpoint '${cp.displayName}' has its files on VM host '${cp.node ?? 'the single host'}', not here`);
    if (cp.state !== 'ready') throw failedPrecondition(`checkpoint '${cp.displayName}' is ${cp.state}, not ready${cp.stateMessage === null ? '' : `: ${cp.stateMessage}`}`);
    if (input?.limits !== undefined && input.limits.memory_mib !== cp.resources.limits.memory_mib) {
      throw invalidArgument(`a fork has its checkpoint's memory limit (${cp.resources.limits.memory_mib} MiB)`);
    }
    if (input?.vcpus !== undefined && input.vcpus !== cp.resources.vcpus) {
      throw invalidArgument(`a fork has its checkpoint's vcpus (${cp.resources.vcpus})`);
    }
    const requests = { memory_mib: input?.requests?.memory_mib ?? cp.resources.requests.memory_mib };
    return { checkpoint: cp, resources: checkResources({ ...cp.resources, requests }, this.machines.hostLimits()) };
  }

  /** The system checkpoint a plain create forks (made on first use of its shape), and a warm spare of it if one is ready. */
  async #template(resources: Resources): Promise<{ baseCheckpointId: string | null; spareId: string | null }> {
    if (this.#checkpoints === null) return { baseCheckpointId: null, spareId: null };
    try {
      const baseCheckpointId = (await this.#checkpoints.systemFor(resources)).id;
      return { baseCheckpointId, spareId: this.pool?.take(baseCheckpointId, resources) ?? null };
    } catch (err) {
      if (err instanceof VesselError) throw err;
      this.log.error({ err }, 'could not make the system checkpoint');
      throw unavailable(`the guest image could not be booted into a template: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  #resourcesFromInput(input: RuntimeCreateInput['resources']): Resources {
    const limit = input?.limits?.memory_mib ?? DEFAULT_MEMORY_MIB;
    return checkResources(
      { limits: { memory_mib: limit }, requests: { memory_mib: input?.requests?.memory_mib ?? limit }, vcpus: input?.vcpus ?? 1 },
      this.machines.hostLimits(),
    );
  }

  #spec(rt: Runtime, tap: string): VmSpec {
    return { runtimeId: rt.id, resources: rt.resources, fromCheckpointId: rt.baseCheckpointId, templateId: rt.templateId, hostname: rt.displayName, tap };
  }

  /** A template a runtime may boot from: the tenant's, ready, and on this host. */
  async #templateOf(tenantId: string, ref: string): Promise<Template> {
    const t = await this.store.templates.find(tenantId, ref);
    if (t === undefined) throw notFound('template', ref);
    if (t.node !== this.node) throw failedPrecondition(`template '${t.displayName}' has its disk on VM host '${t.node ?? 'the single host'}', not here`);
    if (t.state === 'building') throw failedPrecondition(`template '${t.displayName}' is still building; its build log says how far it is (GET /v1/templates/${t.displayName}/build)`);
    if (t.state === 'failed') throw failedPrecondition(`template '${t.displayName}' failed to build${t.failure === null ? '' : ` at '${t.failure.step}'`}; build it again`);
    return t;
  }

  #requireDriver(): void {
    const reason = this.machines.unavailableReason();
    if (reason !== null) throw unavailable(reason);
  }

  async #save(rt: Runtime, changes: Partial<Runtime>): Promise<Runtime> {
    const now = new Date().toISOString();
    if (changes.status !== undefined && changes.status !== rt.status) {
      // The auto-delete clock starts when the runtime stops running, and stops when it runs again.
      const stopped = STOPPED_STATUSES.includes(changes.status);
      if (!stopped) changes.stoppedAt = null;
      else if (!STOPPED_STATUSES.includes(rt.status)) changes.stoppedAt = now;
    }
    Object.assign(rt, changes, { updatedAt: now });
    await this.store.runtimes.update(rt);
    return rt;
  }
}
