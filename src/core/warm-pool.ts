/**
 * Spare VMs, already forked from the current system checkpoint, with their network attached and
 * their clock set, each under the runtime id it will have. A create takes one and only has to
 * give it its name and fresh entropy, which costs a few agent calls instead of a restore; the
 * pool refills in the background. Spares are not runtimes: nothing of them is stored; a clean
 * shutdown removes them, and after a crash the driver's sweep and the gateway's restore do.
 */
import { randomUUID } from 'node:crypto';
import type { Machines, NetworkGateway } from './ports.js';
import type { Resources } from './types.js';

interface Logger {
  info(o: object, m: string): void;
  warn(o: object, m: string): void;
}

const sameShape = (a: Resources, b: Resources): boolean =>
  a.limits.memory_mib === b.limits.memory_mib && a.requests.memory_mib === b.requests.memory_mib && a.vcpus === b.vcpus;

export class WarmPool {
  #spares: string[] = [];
  #target: { checkpointId: string; resources: Resources } | null = null;
  #filling: Promise<void> | null = null;
  #closed = false;

  constructor(
    private readonly machines: Machines,
    private readonly gateway: NetworkGateway,
    private readonly size: number,
    private readonly log: Logger,
  ) {}

  /**
   * The runtime id of a ready spare forked from `checkpointId` with this shape, or null. Asking
   * for another checkpoint or shape makes that the pool's target from now on.
   */
  take(checkpointId: string, resources: Resources): string | null {
    if (this.size <= 0 || this.#closed) return null;
    const target = this.#target;
    if (target === null || target.checkpointId !== checkpointId || !sameShape(target.resources, resources)) {
      const stale = this.#spares;
      this.#spares = [];
      this.#target = { checkpointId, resources };
      void this.discard(...stale);
      this.#refill();
      return null;
    }
    const id = this.#spares.shift() ?? null;
    this.#refill();
    return id;
  }

  /** Stops refilling and removes the spares (after a crash, the next start's sweep does). */
  async close(): Promise<void> {
    this.#closed = true;
    await this.#filling;
    const spares = this.#spares;
    this.#spares = [];
    await this.discard(...spares);
  }

  #refill(): void {
    if (this.#filling !== null) return;
    this.#filling = (async () => {
      while (!this.#closed && this.#target !== null && this.#spares.length < this.size) {
        const target = this.#target;
        const id = randomUUID();
        try {
          // A spare may reach nothing until it is claimed: its policy is the default deny-all.
          const tap = await this.gateway.attach({ runtimeId: id, tenantId: '', policy: { enabled: true, allowed_hosts: [] }, rules: [] });
          await this.machines.createSpare({ runtimeId: id, resources: target.resources, fromCheckpointId: target.checkpointId, hostname: 'vessel', tap });
        } catch (err) {
          await this.discard(id);
          // Capacity and other refusals: try again at the next take, not in a loop.
          this.log.warn({ err: err instanceof Error ? err.message : String(err) }, 'could not prepare a spare VM');
          return;
        }
        if (this.#target === target) this.#spares.push(id);
        else await this.discard(id);
      }
    })().finally(() => (this.#filling = null));
  }

  /** Removes spares' VMs and TAPs; also for a spare taken by a create that then failed. */
  async discard(...ids: string[]): Promise<void> {
    for (const id of ids) {
      await this.machines.destroy(id).catch(() => undefined);
      await this.gateway.detach(id).catch(() => undefined);
    }
  }
}
