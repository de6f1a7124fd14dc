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
import type { CheckpointDescription, CheckpointFiles, Machines, RemoteCheckpoint, Store } from './ports.js';
import type { Readable } from 'node:stream';
import { MOVING_MESSAGE, stampAfter, type Logger, type RuntimeNetwork, type RuntimeService } from './runtimes.js';
import type { AuditService } from './audits.js';
import type { Runtime, RuntimeStatus } from './types.js';

/** What the moving host tells the one that takes the runtime. */
export interface MoveOffer {
  runtimeId: string;
  /** The VM host it comes from. */
  from: string;
  /** Its capture: a checkpoint's files on `from`, under this id, named by no record. */
  captureId: string;
  /** The row's `updated_at` when the move began: the commit swaps on it. */
  stamp: string;
}

/** How long apart a host tries again to learn from the store an outcome it could not hear. */
const SETTLE_PAUSE_MS = 2000;
/** The target gives up learning after this many tries; its restart then settles it (it keeps the VM paused meanwhile). */
const TARGET_SETTLE_TRIES = 15;

type Outcome = 'here' | 'there' | 'unknown';

/**
 * What moves: a runtime with a VM (running, paused) as its whole machine, one without (shut down,
 * crashed) as its disk. A suspended one would need its saved memory carried as well: not built.
 */
export const MOVABLE: readonly RuntimeStatus[] = ['running', 'paused', 'shutdown', 'crashed'];
const MOVABLE_SAID = 'a runtime moves when running, paused, shut down or crashed (resume a suspended one first)';
const hasVm = (rt: Runtime): boolean => rt.status === 'running' || rt.status === 'paused';

export class RuntimeMoves {
  /** Captures of runtimes moving away from this host, by runtime: what the taking host may read. */
  readonly #outgoing = new Map<string, string>();

  constructor(
    private readonly store: Store,
    private readonly runtimes: RuntimeService,
    private readonly driver: Machines & CheckpointFiles,
    private readonly network: RuntimeNetwork,
    /** Where a move is recorded for the runtime's tenant to see. */
    private readonly audits: Pick<AuditService, 'record'>,
    private readonly log: Logger,
    private readonly node: string,
  ) {}

  /**
   * On the host that runs it: moves the runtime to VM host `to`, which `send` asks to take it.
   * Resolves with the row once the store says it is there. Otherwise the runtime stays here as
   * it was, and the refusal is rethrown.
   */
  async moveOut(tenantId: string, ref: string, to: string, send: (offer: MoveOffer) => Promise<void>): Promise<Runtime> {
    if (to === this.node) throw failedPrecondition(`runtime '${ref}' is on VM host '${to}' already`);
    const found = await this.runtimes.get(tenantId, ref);
    return this.runtimes.whileMoving(found.id, to, async () => {
      const rt = await this.store.runtimes.findById(found.id);
      if (rt === undefined || rt.node !== this.node) throw new VesselError('unavailable', `runtime '${ref}' is no longer on VM host '${this.node}'; retry`, { retryAfterSecs: 1 });
      if (!MOVABLE.includes(rt.status)) throw failedPrecondition(`runtime '${rt.displayName}' is ${rt.status}; ${MOVABLE_SAID}`);
      const stamp = stampAfter(rt.updatedAt);
      await this.store.runtimes.update({ ...rt, statusMessage: `${MOVING_MESSAGE} '${to}'`, updatedAt: stamp });
      const captureId = randomUUID();
      let refusal: { error: unknown } | null = null;
      try {
        if (!hasVm(rt)) {
          // Its disk alone: nothing writes it while the runtime holds this lock.
          await this.driver.captureDisk(rt.id, captureId, { memoryMib: rt.resources.limits.memory_mib, vcpus: rt.resources.vcpus });
        } else {
          // Paused for good here: whatever it did after the capture would not go with it.
          if (rt.status === 'running') await this.driver.pause(rt.id);
          await this.driver.checkpoint(rt.id, captureId);
        }
        this.#outgoing.set(rt.id, captureId);
        await send({ runtimeId: rt.id, from: this.node, captureId, stamp });
      } catch (err) {
        refusal = { error: err };
      } finally {
        this.#outgoing.delete(rt.id);
      }
      // Whatever the answer said, the store decides: the swap back either loses to a commit
      // there (the answer, heard or not, was yes) or wins, and no commit can come after it.
      const moved = !(await this.#stay(rt.id, stamp));
      if (!moved) {
        await this.driver.deleteCheckpoint(captureId).catch((err: unknown) => this.log.warn({ runtimeId: rt.id, err }, 'could not drop a move capture'));
        if (rt.status === 'running') await this.driver.resume(rt.id);
        this.runtimes.touch(rt.id);
        if (refusal !== null) throw refusal.error;
        throw unavailable(`runtime '${rt.displayName}' stayed on VM host '${this.node}'`);
      }
      // Its VM and files here are the past. What cannot be cleared now is the move's leftover,
      // not its failure: a restart removes VMs and files that no record gives this host.
      for (const clear of [() => this.driver.destroy(rt.id), () => this.network.detach(rt.id), () => this.driver.deleteCheckpoint(captureId)]) {
        await clear().catch((err: unknown) => this.log.warn({ runtimeId: rt.id, err }, 'could not clear what a moved runtime left on its old host'));
      }
      this.log.info({ runtimeId: rt.id, from: this.node, to }, 'runtime moved to another VM host');
      return (await this.store.runtimes.findById(rt.id)) ?? rt;
    });
  }

  /**
   * The swap back to this host, tried until the store answers: true when the runtime stays
   * here, false when the other host's commit came first. One stamp for every try, so that a
   * swap whose answer was lost is recognized on the next read.
   */
  async #stay(runtimeId: string, stamp: string): Promise<boolean> {
    const next = { node: this.node, statusMessage: null, updatedAt: stampAfter(stamp) };
    for (let attempt = 1; ; attempt++) {
      try {
        if (await this.store.runtimes.handOver(runtimeId, { node: this.node, updatedAt: stamp }, next)) return true;
        const row = await this.store.runtimes.findById(runtimeId);
        // Lost answer of an earlier try of this very swap: it stays.
        return row?.node === this.node && row.updatedAt === next.updatedAt;
      } catch (err) {
        // Neither resumed nor dropped while the store cannot say which: calls are told to retry meanwhile.
        if (attempt % 15 === 1) this.log.warn({ runtimeId, err: (err as Error).message }, 'cannot settle a runtime move with the store yet; retrying');
        await new Promise((r) => setTimeout(r, SETTLE_PAUSE_MS));
      }
    }
  }

  /** What the taking host reads of the capture of a runtime moving away from this host. */
  async describeCapture(tenantId: string, ref: string, captureId: string): Promise<CheckpointDescription> {
    return this.driver.describeCheckpoint(await this.#captureOf(tenantId, ref, captureId));
  }

  async readCapture(tenantId: string, ref: string, captureId: string, file: string): Promise<Readable> {
    return this.driver.readCheckpointFile(await this.#captureOf(tenantId, ref, captureId), file);
  }

  async #captureOf(tenantId: string, ref: string, captureId: string): Promise<string> {
    const rt = await this.store.runtimes.find(tenantId, ref);
    if (rt === undefined || this.#outgoing.get(rt.id) !== captureId) throw failedPrecondition(`runtime '${ref}' is not moving away from VM host '${this.node}' with capture ${captureId}`);
    return captureId;
  }

  /**
   * On the host that takes it: copies the capture from `offer.from` (through `source`), restores
   * the VM from it, paused, and commits the runtime as its own unless `stillWanted` says the
   * moving host gave up meanwhile; only then does its guest run here. Short of the commit,
   * nothing of it is left here.
   */
  async takeHere(tenantId: string, ref: string, offer: MoveOffer, source: RemoteCheckpoint, stillWanted: () => boolean): Promise<Runtime> {
    const first = await this.store.runtimes.find(tenantId, ref);
    if (first === undefined || first.id !== offer.runtimeId) throw notFound('runtime', ref);
    return this.runtimes.withLock(first.id, async () => {
      const rt = (await this.store.runtimes.findById(first.id)) ?? first;
      if (rt.node !== offer.from || rt.updatedAt !== offer.stamp || !MOVABLE.includes(rt.status)) {
        throw failedPrecondition(`runtime '${rt.displayName}' changed since VM host '${offer.from}' began to move it`);
      }
      // Files of an earlier take that a crash cut short are not this take's to remove: a restart does.
      if ((await this.driver.runtimeIds()).includes(rt.id)) throw unavailable(`VM host '${this.node}' still holds files of an earlier move of runtime '${rt.displayName}'; they go at its next start`);
      const moved: Runtime = { ...rt, node: this.node, statusMessage: null, updatedAt: stampAfter(offer.stamp) };
      const { captureId } = offer;
      const undo = async () => {
        await this.driver.destroy(rt.id).catch(() => undefined);
        await this.network.detach(rt.id).catch(() => undefined);
        await this.driver.deleteCheckpoint(captureId).catch(() => undefined);
      };
      let outcome: Outcome = 'here';
      try {
        await this.driver.importCheckpoint(captureId, source, { memoryMib: rt.resources.limits.memory_mib, vcpus: rt.resources.vcpus });
        if (!hasVm(rt)) {
          // A disk to boot at its next start, which attaches its network then.
          await this.driver.adoptDisk(rt.id, captureId);
        } else {
          const tap = await this.network.attach(moved);
          await this.driver.create({ runtimeId: rt.id, resources: rt.resources, fromCheckpointId: captureId, hostname: rt.displayName, tap, paused: true });
        }
        if (!stillWanted()) throw unavailable(`VM host '${offer.from}' stopped waiting for the move of runtime '${rt.displayName}'`);
        outcome = await this.#commit(rt.id, offer, moved.updatedAt);
        if (outcome === 'there') throw failedPrecondition(`runtime '${rt.displayName}' stayed on VM host '${offer.from}': the move was called off there`);
      } catch (err) {
        // A commit whose outcome the store would not tell keeps the paused VM: this host's restart
        // finds the row and either resumes it (the commit happened) or removes it.
        if (outcome !== 'unknown') await undo();
        if (err instanceof VesselError) throw err;
        this.log.error({ runtimeId: rt.id, from: offer.from, err }, 'could not take a moving runtime');
        throw unavailable(`runtime '${rt.displayName}' could not be restored on VM host '${this.node}': ${err instanceof Error ? err.message : String(err)}`);
      }
      if (outcome === 'unknown') throw unavailable(`runtime '${rt.displayName}': the store did not say whether its move committed; VM host '${this.node}' keeps it paused until it restarts`);
      // This host's now. The VM keeps the capture's RAM it maps, and its disk the layers it stands on.
      await this.driver.deleteCheckpoint(captureId).catch((err: unknown) => this.log.warn({ runtimeId: rt.id, err }, 'could not drop a move capture'));
      if (rt.status === 'running') {
        try {
          await this.driver.resume(rt.id);
        } catch (err) {
          const message = `the VM did not run again after its move: ${err instanceof Error ? err.message : String(err)}`;
          this.log.error({ runtimeId: rt.id, err }, 'a moved runtime did not run again');
          await this.store.runtimes.update({ ...moved, status: 'crashed', statusMessage: message });
          return { ...moved, status: 'crashed', statusMessage: message };
        }
      }
      this.runtimes.touch(rt.id);
      this.log.info({ runtimeId: rt.id, from: offer.from, to: this.node }, 'runtime moved here');
      const lifecycle = { action: 'move' as const, reason: `moved from VM host '${offer.from}' to '${this.node}'`, runtime_name: rt.displayName };
      await this.audits
        .record([{ id: randomUUID(), tenantId: rt.tenantId, runtimeId: rt.id, category: 'lifecycle', payload: { lifecycle }, createdAt: moved.updatedAt }])
        .catch((err: unknown) => this.log.warn({ runtimeId: rt.id, err }, 'could not record a runtime move'));
      return moved;
    });
  }

  /** The commit's swap: 'here' when it took, 'there' when the moving host kept it, 'unknown' when the store would not say. */
  async #commit(runtimeId: string, offer: MoveOffer, updatedAt: string): Promise<Outcome> {
    const next = { node: this.node, statusMessage: null, updatedAt };
    for (let attempt = 1; attempt <= TARGET_SETTLE_TRIES; attempt++) {
      try {
        if (attempt === 1 && (await this.store.runtimes.handOver(runtimeId, { node: offer.from, updatedAt: offer.stamp }, next))) return 'here';
        // A lost answer: the row says which swap won.
        const row = await this.store.runtimes.findById(runtimeId);
        return row?.node === this.node && row.updatedAt === updatedAt ? 'here' : 'there';
      } catch (err) {
        this.log.warn({ runtimeId, err: (err as Error).message }, 'cannot learn whether a runtime move committed yet; retrying');
        await new Promise((r) => setTimeout(r, SETTLE_PAUSE_MS));
      }
    }
    return 'unknown';
  }
}
