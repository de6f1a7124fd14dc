/**
 * A VM's identity through vessel-agent's IDENTITY request, which the agent applies itself with
 * no process spawned (guest/agent/identity.c): fresh entropy credited and the kernel CRNG
 * reseeded first, then the clock, then the hostname and /run/vessel/hosts. The agent's END is
 * the acknowledgement; the VM counts as ready only after it. After a pause only the clock is set
 * again (with fresh entropy, which costs nothing more).
 */
import { randomBytes } from 'node:crypto';
import type { AgentClient } from './agent/agent-client.js';

const ENTROPY_BYTES = 64;
/** Linux keeps at most 64 bytes of hostname; display names may be longer. */
const MAX_HOSTNAME = 63;

const guestHostname = (displayName: string): string => displayName.slice(0, MAX_HOSTNAME);
const now = (): bigint => BigInt(Date.now()) * 1_000_000n;

/**
 * Sets the VM's identity and waits until the guest has applied it. `setClock` is false only for
 * a warm spare being claimed, whose clock has been running since it was set.
 */
export async function giveIdentity(agent: AgentClient, hostname: string, setClock: boolean): Promise<void> {
  await agent.setIdentity({ entropy: randomBytes(ENTROPY_BYTES), clockNs: setClock ? now() : 0n, hostname: guestHostname(hostname) }).catch((err: Error) => {
    throw new Error(`the guest could not apply its identity: ${err.message}`, { cause: err });
  });
}

/** The guest's clock stands still while QEMU is stopped (a pause, a checkpoint's capture). */
export async function syncClock(agent: AgentClient): Promise<void> {
  await agent.setIdentity({ entropy: randomBytes(ENTROPY_BYTES), clockNs: now() });
}
