/**
 * A VM host's lease (docs/scaling.md, "Leases"): it registers in the store with what it can hold,
 * and renews well before the lease runs out. API nodes place nothing on a host whose lease ran
 * out, and show its runtimes `unavailable`; when it renews again, it is back.
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, statfsSync } from 'node:fs';
import { join } from 'node:path';
import { VesselError } from '../core/errors.js';
import type { NodeRepo } from '../core/ports.js';
import { createFileDurably } from '../platform/durable-files.js';
import type { Logger } from '../core/runtimes.js';
import type { NodeCapacity, NodeRegistration } from '../core/types.js';

export interface LeaseOptions {
  name: string;
  /** This host's id (hostIdentity): the name is its own while its lease runs. */
  holder: string;
  /**
   * Called when a renewal finds the name taken by another host, which could happen only after
   * this host's lease ran out: that host now acts for the name, and this one must stop.
   */
  onTaken(err: Error): void;
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
        if (err instanceof VesselError && err.code === 'failed_precondition') {
          void this.stop();
          return this.options.onTaken(err);
        }
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
    const { name, holder, internalUrl, ingressAddress, leaseSecs } = this.options;
    const registration: NodeRegistration = { name, holder, internalUrl, ingressAddress, capacity: this.options.capacity() };
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

const HOST_ID_FILE = 'host-id';
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * This host's id, made at its first start and kept in its data directory: the same host after a
 * restart, however quick, is itself; another host given the same name is not.
 */
export function hostIdentity(dataDir: string): string {
  const path = join(dataDir, HOST_ID_FILE);
  try {
    createFileDurably(path, `${randomUUID()}\n`, 0o644);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
  }
  const id = readFileSync(path, 'utf8').trim();
  if (!UUID.test(id)) throw new Error(`${path} does not hold a host id; remove it, and a new one is made at the next start`);
  return id;
}
