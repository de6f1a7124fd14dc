/**
 * A fleet's VM hosts as last read from the store, read again at most once a second: leases run
 * for seconds, and a busy list, every forwarded call and every ingress connection must not each
 * cost a query. On a single host the store has none, and nothing asks.
 */
import type { NodeRepo } from './ports.js';
import type { VmNode } from './types.js';

const TTL_MS = 1000;

export class NodeDirectory {
  #read: { at: number; byName: Promise<Map<string, VmNode>> } | null = null;

  constructor(private readonly nodes: NodeRepo) {}

  byName(): Promise<Map<string, VmNode>> {
    const now = Date.now();
    if (this.#read === null || now - this.#read.at > TTL_MS) {
      const byName = this.nodes.list().then((list) => new Map(list.map((n) => [n.name, n])));
      // A failed read is not kept: the next call reads again.
      byName.catch(() => (this.#read = null));
      this.#read = { at: now, byName };
    }
    return this.#read.byName;
  }

  find = async (name: string): Promise<VmNode | undefined> => (await this.byName()).get(name);

  list = async (): Promise<VmNode[]> => [...(await this.byName()).values()];
}
