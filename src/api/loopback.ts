/** Whether the API's listen address is reachable from this host only. */
import { BlockList, isIP } from 'node:net';

const LOOPBACK = new BlockList();
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4');
LOOPBACK.addAddress('::1', 'ipv6');

/**
 * 127.0.0.0/8, ::1 (in any spelling, or IPv4-mapped) and the name localhost. Any other name is
 * taken as reachable from elsewhere: what it resolves to can change.
 */
export function isLoopbackHost(host: string): boolean {
  const address = host.replace(/^\[(.*)\]$/, '$1');
  if (address.toLowerCase() === 'localhost') return true;
  const family = isIP(address);
  return family !== 0 && LOOPBACK.check(address, family === 4 ? 'ipv4' : 'ipv6');
}
