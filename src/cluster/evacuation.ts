/**
 * Emptying a VM host (`vessel node evacuate NAME`; docs/scaling.md, "Draining" and "Moving runtimes"):
 * it is drained, then each of its runtimes moves to the host placement picks, keeping its id
 * (running and paused ones whole, shut-down and crashed ones as their disk; core/runtime-moves.ts),
 * and each of its tenants' ready checkpoints moves there too. One at a time, so
 * that placement sees each move's load before the next. What cannot move is said, with why.
 */
import { randomUUID } from 'node:crypto';
import type { Store } from '../core/ports.js';
import { MOVABLE } from '../core/runtime-moves.js';
import type { Principal, VmNode } from '../core/types.js';
import { moveCheckpoint } from './checkpoint-moves.js';
import type { FleetKeys } from './fleet-keys.js';
import type { HopClient } from './hop-proxy.js';
import { placeRuntime, type Demand } from './placement.js';
import { moveRuntime } from './runtime-moves.js';

export interface EvacuationLine {
  kind: 'runtime' | 'checkpoint';
  id: string;
  name: string;
  tenant: string;
  /** Where it is now: the host it went to, or the evacuated one. */
  node: string;
  moved: boolean;
  /** Why it stayed. */
  reason?: string;
}

/** The operator acts for each object's tenant: the fleet secret vouches for that, as an API node's does. */
const operatorFor = (tenantId: string): Principal => ({ tokenId: 'operator-evacuation', tenantId, scopes: new Set(['runtimes:write']) });

/** Resolves with what stayed on the host (0: it is empty of runtimes that run and of checkpoints). */
export async function evacuate(store: Store, client: HopClient & { keys: FleetKeys }, name: string, report: (line: EvacuationLine) => void): Promise<number> {
  if (!(await store.nodes.setDraining(name, true))) throw new Error(`no VM host is registered as '${name}'`);
  let stayed = 0;
  const say = (line: EvacuationLine) => {
    if (!line.moved) stayed++;
    report(line);
  };
  const place = async (demand: Demand): Promise<VmNode> => {
    const choice = placeRuntime(await store.nodes.list(), await store.nodes.load(), demand);
    if (typeof choice === 'string') throw new Error(choice);
    return choice;
  };
  const source = async (): Promise<VmNode> => {
    const node = await store.nodes.find(name);
    if (node?.alive !== true) throw new Error(`VM host '${name}' holds no lease: only a live host's runtimes and files can move`);
    return node;
  };

  for (const rt of (await store.runtimes.listAll()).filter((r) => r.node === name)) {
    const line = { kind: 'runtime' as const, id: rt.id, name: rt.displayName, tenant: rt.tenantId };
    if (!MOVABLE.includes(rt.status)) {
      say({ ...line, node: name, moved: false, reason: `it is ${rt.status}; a runtime moves when running, paused, shut down or crashed` });
      continue;
    }
    let target: VmNode | null = null;
    try {
      target = await place({ memoryMib: rt.resources.limits.memory_mib, vcpus: rt.resources.vcpus });
      await moveRuntime(client, await source(), operatorFor(rt.tenantId), randomUUID(), rt.id, target.name);
      say({ ...line, node: target.name, moved: true });
    } catch (err) {
      // The answer is not the truth when it was lost (a timeout, a cut connection): the row is.
      const now = await store.runtimes.findById(rt.id).catch(() => undefined);
      if (target !== null && now?.node === target.name) say({ ...line, node: target.name, moved: true });
      else say({ ...line, node: now?.node ?? name, moved: false, reason: (err as Error).message });
    }
  }

  for (const cp of (await store.checkpoints.listAll()).filter((c) => c.node === name && c.tenantId !== null && !c.deleted)) {
    const line = { kind: 'checkpoint' as const, id: cp.id, name: cp.displayName, tenant: cp.tenantId! };
    if (cp.state !== 'ready') {
      say({ ...line, node: name, moved: false, reason: `it is ${cp.state}; only a ready checkpoint moves` });
      continue;
    }
    try {
      await source();
      const target = await place({ memoryMib: cp.resources.limits.memory_mib, vcpus: cp.resources.vcpus });
      await moveCheckpoint(client, target, name, operatorFor(cp.tenantId!), randomUUID(), cp.id);
      say({ ...line, node: target.name, moved: true });
    } catch (err) {
      say({ ...line, node: name, moved: false, reason: (err as Error).message });
    }
  }
  return stayed;
}
