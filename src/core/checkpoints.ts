/**
 * Checkpoints: capture in the background, system templates, and deletion. A deleted
 * checkpoint disappears at once; the driver keeps its disk layer for as long as a runtime or
 * another checkpoint sits on it, and frees it after the last one goes.
 */
import { randomUUID } from 'node:crypto';
import { failedPrecondition, invalidArgument, notFound } from './errors.js';
import type { CheckpointUploads } from './checkpoint-uploads.js';
import { requireState } from './lifecycle.js';
import { checkDisplayName } from './names.js';
import type { CheckpointArchive, CheckpointDescription, CheckpointFiles, Machines, RemoteCheckpoint, Store } from './ports.js';
import type { Readable } from 'node:stream';
import type { TenantQuotas } from './quotas.js';
import type { Logger, RuntimeService } from './runtimes.js';
import type { Checkpoint, Page, PageRequest, Resources } from './types.js';
import { KeyedMutex } from './keyed-mutex.js';

export interface CheckpointCreateInput {
  kind?: string;
  name?: string;
}

/** `<runtime>-<random>`, kept within the 128 characters a name may have. */
const defaultCheckpointName = (runtimeName: string): string => `${runtimeName.slice(0, 110)}-${randomUUID().slice(0, 8)}`;

/**
 * One template per shape: memory limit, vCPUs, and the memory request when it is smaller, since
 * a template's balloon is inflated to the request before it is captured (its forks then share
 * its pages with the balloon already in place, and need not be moved off them to shrink).
 */
export const systemCheckpointName = (imageId: string, r: Resources): string =>
  `system-${imageId}-${r.limits.memory_mib}m${r.requests.memory_mib < r.limits.memory_mib ? `-r${r.requests.memory_mib}m` : ''}-${r.vcpus}c`;

export class CheckpointService {
  readonly #captures = new Set<Promise<void>>();
  readonly #templates = new KeyedMutex();
  /** Moves of a checkpoint's files to this host, one per checkpoint at a time. */
  readonly #moves = new KeyedMutex();
  /**
   * Checkpoints whose files matched their recorded digests since this process started (or that
   * it captured itself), with the check in progress for the others. A fork waits for its
   * checkpoint's check; after a start, every ready checkpoint is checked in the background.
   */
  readonly #intact = new Map<string, Promise<void>>();
  #closed = false;

  constructor(
    private readonly store: Store,
    private readonly runtimes: RuntimeService,
    private readonly driver: Machines & CheckpointFiles,
    private readonly quotas: TenantQuotas,
    private readonly log: Logger,
    /** The VM host this process is; null on a single host. It keeps only its own checkpoints' files. */
    private readonly node: string | null = null,
    /** Object storage, where the fleet has one (docs/scaling.md, "Object storage"): a checkpoint whose host is gone is restored from it. */
    private readonly archive: { files: CheckpointArchive; uploads: CheckpointUploads } | null = null,
  ) {}

  async create(tenantId: string, runtimeRef: string, input: CheckpointCreateInput): Promise<Checkpoint> {
    return (await this.#begin(tenantId, runtimeRef, input)).checkpoint;
  }

  /** A create that resolves once the capture ended: with the ready checkpoint, or throwing why it failed. */
  async capture(tenantId: string, runtimeRef: string, input: CheckpointCreateInput): Promise<Checkpoint> {
    const { checkpoint, capture } = await this.#begin(tenantId, runtimeRef, input);
    await capture;
    const cp = await this.get(tenantId, checkpoint.id);
    if (cp.state !== 'ready') throw failedPrecondition(`checkpoint '${cp.displayName}' failed: ${cp.stateMessage ?? 'unknown reason'}`);
    return cp;
  }

  async #begin(tenantId: string, runtimeRef: string, input: CheckpointCreateInput): Promise<{ checkpoint: Checkpoint; capture: Promise<void> }> {
    if ((input.kind ?? 'full') !== 'full') throw invalidArgument(`checkpoint kind '${input.kind}' is not supported; only 'full' is`);
    const runtime = await this.runtimes.get(tenantId, runtimeRef);
    requireState('checkpoint', runtime.status, runtime.displayName);
    const reason = this.driver.unavailableReason();
    if (reason !== null) throw failedPrecondition(reason);
    const cp: Checkpoint = {
      id: randomUUID(),
      tenantId,
      displayName: checkDisplayName(input.name ?? defaultCheckpointName(runtime.displayName), 'name'),
      state: 'creating',
      stateMessage: null,
      resources: runtime.resources,
      sourceRuntimeId: runtime.id,
      templateId: runtime.templateId,
      parentCheckpointId: runtime.baseCheckpointId,
      deleted: false,
      diskBytes: null,
      node: this.node,
      createdAt: new Date().toISOString(),
    };
    await this.quotas.admitCheckpoint(tenantId, () => this.store.checkpoints.insert(cp));
    const capture = this.#capture(cp, runtime.id)
      .catch((err: unknown) => this.log.error({ checkpointId: cp.id, err }, 'checkpoint capture crashed'))
      .finally(() => this.#captures.delete(capture));
    this.#captures.add(capture);
    return { checkpoint: { ...cp }, capture };
  }

  async get(tenantId: string, ref: string): Promise<Checkpoint> {
    const cp = await this.store.checkpoints.find(tenantId, ref, true);
    if (cp === undefined) throw notFound('checkpoint', ref);
    return cp;
  }

  list = (tenantId: string, page: PageRequest, includeSystem: boolean): Promise<Page<Checkpoint>> =>
    this.store.checkpoints.list(tenantId, page, includeSystem);

  async delete(tenantId: string, ref: string): Promise<void> {
    const cp = await this.get(tenantId, ref);
    if (cp.tenantId === null) throw failedPrecondition(`checkpoint '${cp.displayName}' is a system checkpoint and is managed by the service`);
    if (cp.state === 'creating') throw failedPrecondition(`checkpoint '${cp.displayName}' is still being created`);
    const template = (await this.store.templates.listAll()).find((t) => t.checkpointId === cp.id);
    if (template !== undefined) throw failedPrecondition(`checkpoint '${cp.displayName}' is what template '${template.displayName}' starts from; delete the template first`);
    await this.#remove(cp);
  }

  /**
   * What another VM host needs to take this host's files of a checkpoint (docs/scaling.md,
   * "Moving checkpoints"). Only a ready checkpoint of the tenant's own, held here, is offered.
   */
  async describeForMove(tenantId: string, ref: string): Promise<CheckpointDescription> {
    return this.driver.describeCheckpoint((await this.#movable(tenantId, ref)).id);
  }

  /** One file of a checkpoint described by describeForMove. */
  async readForMove(tenantId: string, ref: string, file: string): Promise<Readable> {
    return this.driver.readCheckpointFile((await this.#movable(tenantId, ref)).id, file);
  }

  /**
   * Takes a checkpoint's files from the VM host that holds them (`connect` reaches it), and then
   * the checkpoint itself: from now on it is forked here. Its files are checked against the
   * digests recorded at its capture on their way in, so it is what it was, byte for byte. Resolves
   * with the host it came from (null when it was here already), whose copy is then of no use.
   */
  async moveHere(tenantId: string, ref: string, connect: (node: string, checkpointId: string) => Promise<RemoteCheckpoint>): Promise<{ checkpoint: Checkpoint; from: string | null }> {
    if (this.node === null) throw failedPrecondition('a single host holds every checkpoint already');
    const here = this.node;
    const first = await this.get(tenantId, ref);
    return this.#moves.run(first.id, async () => {
      const cp = await this.get(tenantId, first.id);
      if (cp.node === here) return { checkpoint: cp, from: null };
      if (cp.tenantId === null) throw failedPrecondition(`checkpoint '${cp.displayName}' is a system checkpoint: each VM host makes its own`);
      if (cp.state !== 'ready') throw failedPrecondition(`checkpoint '${cp.displayName}' is ${cp.state}, and only a ready checkpoint moves`);
      if (cp.node === null) throw failedPrecondition(`checkpoint '${cp.displayName}' was made by a single-host service and names no VM host to take it from`);
      const from = cp.node;
      await this.driver.importCheckpoint(cp.id, await this.#sourceOf(cp, connect), { memoryMib: cp.resources.limits.memory_mib, vcpus: cp.resources.vcpus });
      if (!(await this.store.checkpoints.moveNode(cp.id, from, here))) {
        await this.driver.deleteCheckpoint(cp.id);
        throw failedPrecondition(`checkpoint '${cp.displayName}' was deleted or moved elsewhere while its files were copied`);
      }
      this.#intact.set(cp.id, Promise.resolve());
      this.log.info({ checkpointId: cp.id, from, to: here }, 'checkpoint moved here');
      return { checkpoint: { ...cp, node: here }, from };
    });
  }

  /**
   * Where a move takes a checkpoint's files from: the host that holds them while it can be
   * reached (nearer, and no request is paid for), otherwise object storage when the checkpoint
   * is stored there. Either way the import checks every file against its capture's digest.
   */
  async #sourceOf(cp: Checkpoint, connect: (node: string, checkpointId: string) => Promise<RemoteCheckpoint>): Promise<RemoteCheckpoint> {
    try {
      return await connect(cp.node!, cp.id);
    } catch (err) {
      // Whatever kept the holder from describing it (no lease, a refused connection, a host that
      // restarted empty): the stored copy is the same checkpoint, checked the same way.
      const digest = this.archive === null ? null : await this.store.checkpoints.archiveDigest(cp.id);
      if (digest === null) throw err;
      this.log.info({ checkpointId: cp.id, from: cp.node, why: (err as Error).message }, "the checkpoint's host cannot be reached: restoring it from object storage");
      return this.archive!.files.open(cp.id, digest);
    }
  }

  /** Drops this host's copy of a checkpoint that moved to another host; a checkpoint still here is refused. */
  async dropMovedFiles(tenantId: string, ref: string): Promise<void> {
    const first = await this.get(tenantId, ref);
    // Under the move lock, on the row as it is then: a late drop must not take files that a move
    // back to this host has just made its own again.
    await this.#moves.run(first.id, async () => {
      const cp = await this.get(tenantId, first.id);
      if (cp.node === this.node) throw failedPrecondition(`checkpoint '${cp.displayName}' has its files on this host still`);
      this.#intact.delete(cp.id);
      await this.driver.deleteCheckpoint(cp.id);
    });
  }

  /** Captures still running in the background (tests and shutdown wait on them). */
  settled = (): Promise<unknown> => Promise.allSettled([...this.#captures]);

  /** Stops the background verification at the next checkpoint (shutdown). */
  close(): void {
    this.#closed = true;
  }

  /**
   * The service's own checkpoint of a freshly booted image with these resources, made on first
   * use. Every create without a checkpoint forks from it, which is much faster than a boot.
   */
  async systemFor(resources: Resources): Promise<Checkpoint> {
    const shape: Resources = { limits: resources.limits, requests: resources.requests, vcpus: resources.vcpus };
    // Each VM host makes its own templates (its own files), so each has its own name for them.
    const name = `${systemCheckpointName(this.driver.imageId(), shape)}${this.node === null ? '' : `-on-${this.node}`}`;
    return this.#templates.run(name, async () => {
      const existing = await this.store.checkpoints.find(null, name, true);
      if (existing?.state === 'ready') {
        // A damaged template is replaced by a fresh one; forks already made from it keep running.
        const intact = await this.ensureIntact(existing).then(() => true, () => false);
        if (intact) return existing;
        this.log.warn({ checkpointId: existing.id, name }, 'system checkpoint damaged; making it again');
      }
      if (existing !== undefined) await this.#remove(await this.#current(existing));
      const cp: Checkpoint = {
        id: randomUUID(),
        tenantId: null,
        displayName: name,
        state: 'creating',
        stateMessage: null,
        resources: shape,
        sourceRuntimeId: null,
        templateId: null,
        parentCheckpointId: null,
        deleted: false,
        diskBytes: null,
        node: this.node,
        createdAt: new Date().toISOString(),
      };
      await this.store.checkpoints.insert(cp);
      try {
        await this.driver.createTemplate(cp.id, shape);
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        await this.store.checkpoints.update({ ...cp, state: 'failed', stateMessage: message });
        throw err;
      }
      const ready: Checkpoint = { ...cp, state: 'ready' };
      this.#intact.set(cp.id, Promise.resolve());
      await this.store.checkpoints.update(ready);
      this.log.info({ checkpointId: cp.id, name }, 'system checkpoint ready');
      return ready;
    });
  }

  /**
   * A capture cut short by a restart never becomes ready; system checkpoints of another image
   * are retired (their files go once no fork needs them).
   */
  async reconcile(): Promise<void> {
    await this.driver.sweep();
    const image = this.driver.imageId();
    if (this.node !== null) {
      // Files of checkpoints that moved to another host while this one was away (or before it
      // could drop them), and of moves here cut short: the store says where each one lives.
      const where = new Map((await this.store.checkpoints.listAll()).map((cp) => [cp.id, cp.node]));
      for (const id of await this.driver.heldCheckpointIds()) {
        const node = where.get(id);
        if (node !== undefined && node !== this.node) await this.driver.deleteCheckpoint(id);
      }
    }
    // Files no row names: a checkpoint purged while another host held a copy (a delete racing a
    // move), or a runtime move's capture cut short (runtime-moves.ts). Nothing captures or
    // imports yet at this point, so no row is still to come for them.
    const known = new Set((await this.store.checkpoints.listAll()).map((cp) => cp.id));
    for (const id of await this.driver.heldCheckpointIds()) {
      if (known.has(id)) continue;
      this.log.warn({ checkpointId: id }, 'checkpoint files that no record names were removed');
      await this.driver.deleteCheckpoint(id);
    }
    for (const cp of await this.#own()) {
      if (cp.deleted || (cp.tenantId === null && !cp.displayName.startsWith(`system-${image}-`))) {
        await this.#remove(cp);
      } else if (cp.state === 'creating') {
        await this.store.checkpoints.update({ ...cp, state: 'failed', stateMessage: 'the service restarted during the capture' });
        await this.driver.deleteCheckpoint(cp.id).catch(() => undefined);
      }
    }
  }

  /**
   * Checks every ready checkpoint's files in the background, one at a time, so that damage is
   * found (and shown as `failed`) before anyone forks it. Resolves when all are checked.
   */
  async verifyAll(): Promise<void> {
    const t0 = Date.now();
    let checked = 0;
    for (const cp of await this.#own()) {
      if (this.#closed) return;
      if (cp.state !== 'ready' || cp.deleted) continue;
      await this.ensureIntact(cp).catch(() => undefined);
      checked++;
    }
    this.log.info({ checked, ms: Date.now() - t0 }, 'checkpoint files verified');
  }

  /**
   * Resolves once the checkpoint's files match the digests recorded when it became ready. A
   * damaged checkpoint becomes `failed`, says what is wrong, and is refused with
   * failed_precondition: a fork of it would run on corrupt memory or disk.
   */
  ensureIntact(cp: Checkpoint): Promise<void> {
    let check = this.#intact.get(cp.id);
    if (check === undefined) {
      check = this.#verify(cp);
      this.#intact.set(cp.id, check);
      // A damaged checkpoint is failed in the store from now on; nothing needs the result kept.
      check.catch(() => this.#intact.delete(cp.id));
    }
    return check;
  }

  async #verify(cp: Checkpoint): Promise<void> {
    const problem = await this.driver.verifyCheckpoint(cp.id);
    if (problem === null) return;
    const current = await this.#current(cp);
    if (current.node !== this.node) {
      // Moved to another host while this one checked its old copy: that copy says nothing of the one there.
      throw failedPrecondition(`checkpoint '${cp.displayName}' has its files on VM host '${current.node ?? 'none'}' now; retry`);
    }
    this.log.error({ checkpointId: cp.id, name: cp.displayName, problem }, 'checkpoint files are damaged');
    if (!current.deleted) await this.store.checkpoints.update({ ...current, state: 'failed', stateMessage: `its files are damaged: ${problem}` });
    throw failedPrecondition(`checkpoint '${cp.displayName}' cannot be forked: ${problem}`);
  }

  async #movable(tenantId: string, ref: string): Promise<Checkpoint> {
    const cp = await this.get(tenantId, ref);
    if (cp.tenantId === null) throw failedPrecondition(`checkpoint '${cp.displayName}' is a system checkpoint: each VM host makes its own`);
    if (cp.node !== this.node) throw failedPrecondition(`checkpoint '${cp.displayName}' has its files on VM host '${cp.node ?? 'none'}', not here`);
    if (cp.state !== 'ready') throw failedPrecondition(`checkpoint '${cp.displayName}' is ${cp.state}, and only a ready checkpoint moves`);
    return cp;
  }

  /** The checkpoints whose files this host holds. */
  async #own(): Promise<Checkpoint[]> {
    return (await this.store.checkpoints.listAll()).filter((cp) => cp.node === this.node);
  }

  /** The record as stored now (another request may have changed it meanwhile). */
  async #current(cp: Checkpoint): Promise<Checkpoint> {
    return (await this.store.checkpoints.find(cp.tenantId, cp.id, true)) ?? cp;
  }

  async #capture(cp: Checkpoint, runtimeId: string): Promise<void> {
    await this.runtimes.withLock(runtimeId, async () => {
      try {
        const rt = await this.store.runtimes.findById(runtimeId);
        if (rt === undefined) throw new Error('the runtime was deleted before the capture');
        if (rt.node !== this.node) throw new Error(`the runtime moved to VM host '${rt.node}' before the capture; checkpoint it there`);
        requireState('checkpoint', rt.status, rt.displayName);
        const { bytes } = await this.driver.checkpoint(runtimeId, cp.id);
        // The runtime's overlay now sits on the checkpoint's frozen layer.
        await this.store.runtimes.update({ ...rt, baseCheckpointId: cp.id, updatedAt: new Date().toISOString() });
        this.#intact.set(cp.id, Promise.resolve());
        await this.store.checkpoints.update({ ...cp, state: 'ready', resources: rt.resources, diskBytes: bytes });
        this.archive?.uploads.kick();
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        this.log.warn({ checkpointId: cp.id, runtimeId, err: message }, 'checkpoint failed');
        await this.driver.deleteCheckpoint(cp.id).catch(() => undefined);
        // Recording the failure can fail too (a full disk); the restart reconciliation then marks it failed.
        await this.store.checkpoints.update({ ...cp, state: 'failed', stateMessage: message }).catch((e: unknown) => {
          this.log.error({ checkpointId: cp.id, err: e }, 'could not record the failed checkpoint');
        });
      }
    });
  }

  /** Hides the checkpoint for good and drops its files; the driver keeps its disk layer while anything sits on it. */
  async #remove(cp: Checkpoint): Promise<void> {
    this.#intact.delete(cp.id);
    // The row as it is now: one read earlier could put back a node that a move has changed since.
    await this.store.checkpoints.update({ ...(await this.#current(cp)), deleted: true });
    await this.driver.deleteCheckpoint(cp.id);
    if (this.archive !== null && (await this.store.checkpoints.archiveDigest(cp.id)) !== null) {
      // Its chunks stay: other checkpoints may share them (docs/scaling.md, "Object storage").
      await this.archive.files.forget(cp.id).catch((err: unknown) => this.log.warn({ checkpointId: cp.id, err: (err as Error).message }, "a deleted checkpoint's record stays in object storage"));
    }
    await this.store.checkpoints.purge(cp.id);
  }
}
