/**
 * Where a new runtime goes (docs/scaling.md, "Placement"). A fork goes where its checkpoint's
 * files are: they are hundreds of megabytes, and a restore on the host that holds them shares
 * their pages with every other fork there. A plain create goes to the live, undrained host with
 * the largest share of its memory still free, after what it holds and what this API node is
 * placing there right now; ties go to the host with fewer runtimes.
 */
import type { NodeLoad, VmNode } from '../core/types.js';

/** A host with less free disk than this gets no new runtime: a fork's overlay and its checkpoints grow there. */
export const MIN_FREE_DISK_BYTES = 2 * 1024 ** 3;

export interface Demand {
  memoryMib: number;
  vcpus: number;
}

const EMPTY: NodeLoad = { memoryMib: 0, vcpus: 0, runtimes: 0 };

/** The host chosen, or why none can take it. */
export function placeRuntime(nodes: readonly VmNode[], load: ReadonlyMap<string, NodeLoad>, demand: Demand): VmNode | string {
  const open = nodes.filter((n) => n.alive && !n.draining);
  if (open.length === 0) return nodes.some((n) => n.alive) ? 'every VM host is draining' : 'no VM host holds a lease';
  let best: { node: VmNode; share: number; runtimes: number } | null = null;
  for (const node of open) {
    const used = load.get(node.name) ?? EMPTY;
    const free = node.capacity.memoryMib - used.memoryMib - demand.memoryMib;
    if (free < 0 || used.runtimes >= node.capacity.runtimes || node.capacity.diskBytes < MIN_FREE_DISK_BYTES) continue;
    const share = free / node.capacity.memoryMib;
    const better = best === null || share > best.share || (share === best.share && used.runtimes < best.runtimes);
    if (better) best = { node, share, runtimes: used.runtimes };
  }
  return best?.node ?? `no VM host has ${demand.memoryMib} MiB of memory, a runtime slot and ${MIN_FREE_DISK_BYTES / 1024 ** 3} GiB of disk free`;
}

/** Adds one placement to a load map (the API node's own placements in flight). */
export function addLoad(load: Map<string, NodeLoad>, node: string, demand: Demand, sign: 1 | -1): void {
  const was = load.get(node) ?? EMPTY;
  const next = { memoryMib: was.memoryMib + sign * demand.memoryMib, vcpus: was.vcpus + sign * demand.vcpus, runtimes: was.runtimes + sign };
  if (next.runtimes === 0) load.delete(node);
  else load.set(node, next);
}
