/**
 * Host-side names and addresses of runtime networks. Every guest has the same address on its own
 * link (GUEST_NETWORK); on the host each runtime also has an identity address, one per TAP slot,
 * that its traffic is rewritten to on arrival. The gateway's sockets therefore see a distinct
 * source address per runtime, and connections of different VMs never share a conntrack tuple.
 */
export const TAP_PREFIX = 'vsl';
/** A device that holds the gateway address while no runtime TAP exists, so listeners can bind it. */
export const GATEWAY_DEVICE = 'vessel0';
/** Identity addresses: 10.222.0.0/16, slot n is 10.222.(n >> 8).(n & 255). */
export const IDENTITY_POOL = '10.222.0.0/16';
const IDENTITY_BASE = (10 << 24) | (222 << 16);
export const MAX_SLOT = 0xfffe;

export const tapName = (slot: number): string => `${TAP_PREFIX}${slot}`;

export function slotOfTap(name: string): number | null {
  const m = /^vsl(\d{1,5})$/.exec(name);
  if (m === null) return null;
  const slot = Number(m[1]);
  return slot >= 1 && slot <= MAX_SLOT ? slot : null;
}

export function identityAddress(slot: number): string {
  const n = IDENTITY_BASE + slot;
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}
