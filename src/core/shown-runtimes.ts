/**
 * A runtime as a user is shown it. In a fleet (docs/scaling.md), one whose VM host has lost its
 * lease reads `unavailable`, with the host and its last lease in the message, and never its
 * stored status: the VM may be gone, and `running` would be a lie. The stored status stays for
 * when the host comes back and re-adopts it.
 */
import type { NodeDirectory } from './node-directory.js';
import type { Runtime, ShownRuntimeStatus, VmNode } from './types.js';

export type ShownRuntime = Omit<Runtime, 'status'> & { status: ShownRuntimeStatus };

export class ShownRuntimes {
  constructor(private readonly nodes: NodeDirectory) {}

  async one(rt: Runtime): Promise<ShownRuntime> {
    // A single host's runtimes have no node: nothing to ask the store.
    if (rt.node === null) return rt;
    return shown(rt, await this.nodes.find(rt.node));
  }

  async all(rts: Runtime[]): Promise<ShownRuntime[]> {
    if (rts.every((rt) => rt.node === null)) return rts;
    const byName = await this.nodes.byName();
    return rts.map((rt) => (rt.node === null ? rt : shown(rt, byName.get(rt.node))));
  }
}

function shown(rt: Runtime, node: VmNode | undefined): ShownRuntime {
  if (node?.alive === true) return rt;
  const statusMessage =
    node === undefined
      ? `its VM host '${rt.node}' is not registered`
      : `its VM host '${node.name}' has not renewed its lease since it ran out at ${node.leaseExpiresAt}; the runtime was ${rt.status} then`;
  return { ...rt, status: 'unavailable', statusMessage };
}
