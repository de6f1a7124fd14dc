/**
 * Checkpoints: capture in the background, and file lifetimes. A checkpoint's files stay while a
 * runtime's overlay or another checkpoint's layer sits on them, even after the user deletes it.
 */
import { randomUUID } from 'node:crypto';
import { failedPrecondition, invalidArgument, notFound } from './errors.js';
import { requireState } from './lifecycle.js';
import { checkDisplayName } from './names.js';
import type { Store, VmDriver } from './ports.js';
import type { Logger, RuntimeObserver, RuntimeService } from './runtimes.js';
import type { Checkpoint, Page, PageRequest, Runtime } from './types.js';

export interface CheckpointCreateInput {
  kind?: string;
  name?: string;
}

export class CheckpointService {
  readonly #captures = new Set<Promise<void>>();

  constructor(
    private readonly store: Store,
    private readonly runtimes: RuntimeService,
    private readonly driver: VmDriver,
    private readonly log: Logger,
  ) {}

  /** Lets the runtime service tell us when a runtime that held checkpoint files is gone. */
  observer(onPolicy: (rt: Runtime) => void): RuntimeObserver {
    return {
      runtimeDeleted: (rt) => this.#collect(rt.baseCheckpointId),
      policyChanged: onPolicy,
    };
  }

  async create(tenantId: string, runtimeRef: string, input: CheckpointCreateInput): Promise<Checkpoint> {
    if ((input.kind ?? 'full') !== 'full') throw invalidArgument(`checkpoint kind '${input.kind}' is not supported; only 'full' is`);
    const runtime = await this.runtimes.get(tenantId, runtimeRef);
    requireState('checkpoint', runtime.status, runtime.displayName);
    const reason = this.driver.unavailableReason();
    if (reason !== null) throw failedPrecondition(reason);
    const cp: Checkpoint = {
      id: randomUUID(),
      tenantId,
      displayName: checkDisplayName(input.name ?? `${runtime.displayName}-${Date.now().toString(36)}`, 'name'),
      state: 'creating',
      stateMessage: null,
      resources: runtime.resources,
      sourceRuntimeId: runtime.id,
      parentCheckpointId: runtime.baseCheckpointId,
      deleted: false,
      createdAt: new Date().toISOString(),
    };
    await this.store.checkpoints.insert(cp);
    const capture = this.#capture(cp, runtime.id).finally(() => this.#captures.delete(capture));
    this.#captures.add(capture);
    return { ...cp };
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
    await this.store.checkpoints.update({ ...cp, deleted: true });
    await this.#collect(cp.id);
  }

  /** Captures still running in the background (tests and shutdown wait on them). */
  settled = (): Promise<unknown> => Promise.allSettled([...this.#captures]);

  /** A capture cut short by a restart never becomes ready. */
  async reconcile(): Promise<void> {
    for (const cp of await this.store.checkpoints.listAll()) {
      if (cp.state === 'creating') {
        await this.store.checkpoints.update({ ...cp, state: 'failed', stateMessage: 'the service restarted during the capture' });
        await this.driver.deleteCheckpoint(cp.id).catch(() => undefined);
      } else if (cp.deleted) {
        await this.#collect(cp.id);
      }
    }
  }

  async #capture(cp: Checkpoint, runtimeId: string): Promise<void> {
    await this.runtimes.withLock(runtimeId, async () => {
      try {
        const rt = await this.store.runtimes.findById(runtimeId);
        if (rt === undefined) throw new Error('the runtime was deleted before the capture');
        requireState('checkpoint', rt.status, rt.displayName);
        await this.driver.checkpoint(runtimeId, cp.id);
        // The runtime's overlay now sits on the checkpoint's frozen layer.
        await this.store.runtimes.update({ ...rt, baseCheckpointId: cp.id, updatedAt: new Date().toISOString() });
        await this.store.checkpoints.update({ ...cp, state: 'ready', resources: rt.resources });
      } catch (err) {
        const message = err instanceof Error ? err.message : String(err);
        this.log.warn({ checkpointId: cp.id, runtimeId, err: message }, 'checkpoint failed');
        await this.driver.deleteCheckpoint(cp.id).catch(() => undefined);
        await this.store.checkpoints.update({ ...cp, state: 'failed', stateMessage: message });
      }
    });
  }

  /** Frees a deleted checkpoint's files once nothing sits on them, then walks up its parents. */
  async #collect(checkpointId: string | null): Promise<void> {
    while (checkpointId !== null) {
      const cp = await this.store.checkpoints.findById(checkpointId);
      if (cp === undefined || !cp.deleted) return;
      const runtimes = await this.store.runtimes.listAll();
      const checkpoints = await this.store.checkpoints.listAll();
      const inUse =
        runtimes.some((r) => r.baseCheckpointId === cp.id) || checkpoints.some((c) => c.parentCheckpointId === cp.id);
      if (inUse) return;
      await this.driver.deleteCheckpoint(cp.id);
      await this.store.checkpoints.purge(cp.id);
      checkpointId = cp.parentCheckpointId;
    }
  }
}
