/**
 * Moving a runtime to another VM host with its id, name, rules and URLs (docs/scaling.md,
 * "Moving runtimes"): its host pauses it and captures it as a checkpoint that no record names;
 * the other host copies that capture's files (checked against their digests, as a checkpoint
 * move does), restores the VM from them, and takes the runtime's row. The guest goes on where it
 * stopped: its processes, memory and disk; only connections through the old host's gateway end.
 *
 * The store decides where the runtime is, by one compare-and-swap on its row's node and
 * `updated_at` (the stamp its host wrote when the move began). The host that takes it commits
 * with it; the host that moves it, when it cannot tell whether that commit happened, makes the
 * same swap back to itself. Exactly one of the two succeeds, so the runtime runs in one place.
 */
import { randomUUID } from 'node:crypto';
import { VesselError, failedPrecondition, notFound, unavailable } from './errors.js';
import type { CheckpointDescription, CheckpointSource, Store, VmDriver } from './ports.js';
import type { Readable } from 'node:stream';
import { MOVING_MESSAGE, type Logger, type RuntimeNetwork, type RuntimeService } from './runtimes.js';
import type { Runtime } from './types.js';

/** What the moving host tells the one that takes the runtime. */
export interface MoveOffer {
  runtimeId: string;
  /** The VM host it comes from. */
  from: string;
  /** Its capture: a checkpoint's files on `from`, under this id, named by no record. */
  captureId: string;
  /** The row's `updated_at` when the move began: the commit swaps on it. */
  stamp: string;
  /** Whether it runs again once there, or stays paused as it was. */
  status: 'running' | 'paused';
}

/** How often, and how long apart, a moving host tries to settle with the store an outcome it could not hear. */
const SETTLE_TRIES = 6;
const SETTLE_PAUSE_MS = 5000;

export class RuntimeMoves {
  /** Captures of runtimes moving away from this host, by runtime: what the taking host may read. */
  readonly #outgoing = new Map<string, string>();

  constructor(
    private readonly store: Store,
    private readonly runtimes: RuntimeService,
    private readonly driver: VmDriver,
    private readonly network: RuntimeNetwork,
    private readonly log: Logger,
    private readonly node: string,
  ) {}

  /**
   * On the host that runs it: moves the runtime to VM host `to`, which `send` asks to take it
   * (resolving once it has, rejecting otherwise). Resolves with the row as the store has it then.
   * A refusal leaves the runtime here as it was, and is rethrown.
   */
  async moveOut(tenantId: string, ref: string, to: string, send: (offer: MoveOffer) => Promise<void>): Promise<Runtime> {
    if (to === this.node) throw failedPrecondition(`runtime '${ref}' is on VM host '${to}' already`);
    const found = await this.runtimes.get(tenantId, ref);
    return this.runtimes.whileMoving(found.id, to, async () => {
      const rt = await this.store.runtimes.findById(found.id);
      if (rt === undefined || rt.node !== this.node) throw notFound('runtime', ref);
      if (rt.status !== 'running' && rt.status !== 'paused') {
        throw failedPrecondition(`runtime '${rt.displayName}' is ${rt.status}; only a running or paused runtime moves (start it first)`);
      }
      const status = rt.status;
      const stamp = new Date().toISOString();
      await this.store.runtimes.update({ ...rt, statusMessage: `${MOVING_MESSAGE} '${to}'`, updatedAt: stamp });
      const captureId = randomUUID();
      try {
        // Paused for good here: whatever it does after the capture would not go with it.
        if (status === 'running') await this.driver.pause(rt.id);
        await this.driver.checkpoint(rt.id, captureId);
      } catch (err) {
        await this.#stay(rt, stamp, status, captureId);
        throw err;
      }
      this.#outgoing.set(rt.id, captureId);
      let refusal: unknown = null;
      try {
        await send({ runtimeId: rt.id, from: this.node, captureId, stamp, status });
      } catch (err) {
        refusal = err;
      } finally {
        this.#outgoing.delete(rt.id);
      }
      if (refusal !== null && (await this.#stay(rt, stamp, status, captureId))) throw refusal;
      // Taken: its VM and files here are the past. What cannot be cleared now is the move's
      // leftover, not its failure: a restart removes VMs and files that no record gives this host.
      for (const clear of [() => this.driver.destroy(rt.id), () => this.network.detach(rt.id), () => this.driver.deleteCheckpoint(captureId)]) {
        await clear().catch((err: unknown) => this.log.warn({ runtimeId: rt.id, err }, 'could not clear what a moved runtime left on its old host'));
      }
      this.log.info({ runtimeId: rt.id, from: this.node, to }, 'runtime moved to another VM host');
      return (await this.store.runtimes.findById(rt.id)) ?? rt;
    });
  }

  /**
   * After a move that did not happen, or whose answer was lost: the swap back to this host
   * either wins (the runtime stays, and runs again as it was) or loses to the other host's
   * commit (it moved). True when it stays.
   */
  async #stay(rt: Runtime, stamp: string, status: 'running' | 'paused', captureId: string): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        const kept = await this.store.runtimes.handOver(rt.id, { node: this.node, updatedAt: stamp }, { node: this.node, statusMessage: null, updatedAt: new Date().toISOString() });
        if (!kept) return false;
        break;
      } catch (err) {
        // Neither resumed nor dropped while the store cannot say which: a restart settles it (RuntimeService.reconcile).
        if (attempt >= SETTLE_TRIES) throw err;
        this.log.warn({ runtimeId: rt.id, err: (err as Error).message }, 'cannot settle a runtime move with the store yet');
        await new Promise((r) => setTimeout(r, SETTLE_PAUSE_MS));
      }
    }
    await this.driver.deleteCheckpoint(captureId).catch((err: unknown) => this.log.warn({ runtimeId: rt.id, err }, 'could not drop a move capture'));
    if (status === 'running') await this.driver.resume(rt.id);
    return true;
  }

  /** What the taking host reads of the capture of a runtime moving away from this host. */
  async describeCapture(tenantId: string, ref: string): Promise<CheckpointDescription> {
    return this.driver.describeCheckpoint(await this.#captureOf(tenantId, ref));
  }

  async readCapture(tenantId: string, ref: string, file: string): Promise<Readable> {
    return this.driver.readCheckpointFile(await this.#captureOf(tenantId, ref), file);
  }

  async #captureOf(tenantId: string, ref: string): Promise<string> {
    const rt = await this.store.runtimes.find(tenantId, ref);
    const captureId = rt === undefined ? undefined : this.#outgoing.get(rt.id);
    if (captureId === undefined) throw failedPrecondition(`runtime '${ref}' is not moving away from VM host '${this.node}'`);
    return captureId;
  }

  /**
   * On the host that takes it: copies the capture from `offer.from` (through `source`), restores
   * the VM from it, and commits the runtime as its own, unless `stillWanted` says the moving host
   * gave up meanwhile. Anything short of the commit leaves nothing here.
   */
  async takeHere(tenantId: string, ref: string, offer: MoveOffer, source: CheckpointSource, stillWanted: () => boolean): Promise<Runtime> {
    const rt = await this.store.runtimes.find(tenantId, ref);
    if (rt === undefined || rt.id !== offer.runtimeId) throw notFound('runtime', ref);
    if (rt.node !== offer.from || rt.updatedAt !== offer.stamp) {
      throw failedPrecondition(`runtime '${rt.displayName}' changed since VM host '${offer.from}' began to move it`);
    }
    const { captureId } = offer;
    const moved: Runtime = { ...rt, node: this.node, statusMessage: null };
    try {
      await this.driver.importCheckpoint(captureId, source, { memoryMib: rt.resources.limits.memory_mib, vcpus: rt.resources.vcpus });
      const tap = await this.network.attach(moved);
      await this.driver.create({ runtimeId: rt.id, resources: rt.resources, fromCheckpointId: captureId, hostname: rt.displayName, tap });
      if (offer.status === 'paused') await this.driver.pause(rt.id);
      if (!stillWanted()) throw unavailable(`VM host '${offer.from}' stopped waiting for the move of runtime '${rt.displayName}'`);
      moved.updatedAt = new Date().toISOString();
      if (!(await this.store.runtimes.handOver(rt.id, { node: offer.from, updatedAt: offer.stamp }, { node: this.node, statusMessage: null, updatedAt: moved.updatedAt }))) {
        throw failedPrecondition(`runtime '${rt.displayName}' stayed on VM host '${offer.from}': the move was called off there`);
      }
    } catch (err) {
      await this.driver.destroy(rt.id).catch(() => undefined);
      await this.network.detach(rt.id).catch(() => undefined);
      await this.driver.deleteCheckpoint(captureId).catch(() => undefined);
      if (err instanceof VesselError) throw err;
      this.log.error({ runtimeId: rt.id, from: offer.from, err }, 'could not take a moving runtime');
      throw unavailable(`runtime '${rt.displayName}' could not be restored on VM host '${this.node}': ${err instanceof Error ? err.message : String(err)}`);
    }
    // Committed. The VM keeps the capture's RAM it maps, and its disk the layers it stands on.
    await this.driver.deleteCheckpoint(captureId).catch((err: unknown) => this.log.warn({ runtimeId: rt.id, err }, 'could not drop a move capture'));
    this.runtimes.touch(rt.id);
    this.log.info({ runtimeId: rt.id, from: offer.from, to: this.node }, 'runtime moved here');
    return moved;
  }
}
