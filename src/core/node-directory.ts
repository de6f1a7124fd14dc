/**
 * A fleet's VM hosts as last read from the store, read again at most once a second: leases run
 * for seconds, and a busy list, every forwarded call and every ingress connection must not each
 * cost a query. On a single host the store has none, and nothing asks.
 *
 * After an outage of the store, hosts could not renew: every lease that ran out meanwhile would
 * show its host lost, and its runtimes `unavailable`, though nothing happened to them. So no host
 * is taken for lost until the store has been reachable again for a full lease period
 * (docs/scaling.md, "Failure modes"): within that grace, a host whose lease still ran when the
 * outage began counts as alive. A host whose lease had already run out stays lost. The outage is
 * seen by this process's own reads, which `watch()` keeps making while nothing else asks.
 */
import type { NodeRepo } from './ports.js';
import type { VmNode } from './types.js';

const TTL_MS = 1000;

export interface NodeDirectoryOptions {
  /** A VM host's lease: the grace after an outage of the store (0: none). */
  leaseMs: number;
  now?: () => number;
}

export class NodeDirectory {
  #read: { at: number; byName: Promise<Map<string, VmNode>> } | null = null;
  /** When this process's reads of the store began failing; null while they succeed. */
  #failingSince: number | null = null;
  /** The last outage seen, once the store answered again. */
  #lastOutage: { began: number; ended: number } | null = null;
  #watch: NodeJS.Timeout | null = null;
  /** The hosts as the last read that succeeded found them. */
  #lastRead: Map<string, VmNode> | null = null;
  readonly #now: () => number;

  constructor(
    private readonly nodes: NodeRepo,
    private readonly options: NodeDirectoryOptions = { leaseMs: 0 },
  ) {
    this.#now = options.now ?? Date.now;
  }

  byName(): Promise<Map<string, VmNode>> {
    const now = this.#now();
    if (this.#read === null || now - this.#read.at > TTL_MS) {
      const byName = this.nodes.list().then(
        (list) => {
          if (this.#failingSince !== null) {
            this.#lastOutage = { began: this.#failingSince, ended: this.#now() };
            this.#failingSince = null;
          }
          this.#lastRead = new Map(list.map((n) => [n.name, this.#withGrace(n)]));
          return this.#lastRead;
        },
        (err: unknown) => {
          this.#failingSince ??= now;
          // While the store is away the hosts are as last read: none can renew, nor be taken
          // for lost, until it is back (the grace above). With nothing read yet, the failure.
          if (this.#lastRead === null) throw err;
          return this.#lastRead;
        },
      );
      // A failed read with nothing to stand in is not kept: the next call reads again.
      byName.catch(() => (this.#read = null));
      this.#read = { at: now, byName };
    }
    return this.#read.byName;
  }

  find = async (name: string): Promise<VmNode | undefined> => (await this.byName()).get(name);

  list = async (): Promise<VmNode[]> => [...(await this.byName()).values()];

  /** Reads the store every `intervalMs` while nothing else does, so that an outage is seen by a quiet process too. */
  watch(intervalMs: number): void {
    if (this.#watch !== null) return;
    this.#watch = setInterval(() => void this.byName().catch(() => undefined), intervalMs);
    this.#watch.unref();
  }

  close(): void {
    if (this.#watch !== null) clearInterval(this.#watch);
    this.#watch = null;
  }

  #withGrace(node: VmNode): VmNode {
    const outage = this.#lastOutage;
    if (node.alive || outage === null || this.#now() - outage.ended >= this.options.leaseMs) return node;
    // Leases are on the database's clock and the outage on this process's: they agree to within
    // what NTP keeps, seconds below a lease period.
    return Date.parse(node.leaseExpiresAt) >= outage.began ? { ...node, alive: true } : node;
  }
}
