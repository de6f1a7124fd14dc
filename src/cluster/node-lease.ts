/**
 * A VM host's lease (docs/scaling.md, "Leases"): it registers in the store with what it can hold,
 * and renews well before the lease runs out. API nodes place nothing on a host whose lease ran
 * out, and show its runtimes `unavailable`; when it renews again, it is back.
 */
import { statfsSync } from 'node:fs';
import type { NodeRepo } from '../core/ports.js';
import type { Logger } from '../core/runtimes.js';
import type { NodeCapacity, NodeRegistration } from '../core/types.js';

export interface LeaseOptions {
  name: string;
  internalUrl: string;
  ingressAddress: string | null;
  /** How long a lease lasts; it is renewed three times within it, so one slow renewal costs nothing. */
  leaseSecs: number;
  /** Measured afresh at every renewal (free disk changes). */
  capacity: () => NodeCapacity;
}

export class NodeLease {
  #timer: NodeJS.Timeout | null = null;
  #renewing: Promise<void> = Promise.resolve();
  #lapsed = false;

  constructor(
    private readonly nodes: NodeRepo,
    private readonly options: LeaseOptions,
    private readonly log: Logger,
  ) {}

  /** Registers, or fails the start: a host that cannot register would run VMs nobody can reach. */
  async start(): Promise<void> {
    await this.#renew();
    this.#timer = setInterval(() => {
      this.#renewing = this.#renew().catch((err: unknown) => {
        // The store is away (a failover, say): the lease runs on until it is back.
        if (!this.#lapsed) this.log.warn({ err }, 'the node lease could not be renewed; retrying');
        this.#lapsed = true;
      });
    }, (this.options.leaseSecs * 1000) / 3);
    this.#timer.unref();
  }

  async stop(): Promise<void> {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    await this.#renewing;
  }

  async #renew(): Promise<void> {
    const { name, internalUrl, ingressAddress, leaseSecs } = this.options;
    const registration: NodeRegistration = { name, internalUrl, ingressAddress, capacity: this.options.capacity() };
    await this.nodes.renew(registration, leaseSecs);
    if (this.#lapsed) this.log.info({ node: name }, 'the node lease is renewed again');
    this.#lapsed = false;
  }
}

/** Free space where the host keeps its VMs' disks and checkpoints. */
export function freeDiskBytes(dataDir: string): number {
  const fs = statfsSync(dataDir);
  return fs.bavail * fs.bsize;
}
