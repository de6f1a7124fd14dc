/**
 * Addresses the gateway never dials on a guest's behalf: private, loopback, link-local,
 * multicast, metadata and other special-purpose ranges, in IPv4 and IPv6 (with IPv4-mapped and
 * NAT64 forms unwrapped), and the host's own addresses. The operator can open chosen ranges with
 * VESSEL_EGRESS_ALLOW_CIDRS.
 */
import { BlockList, isIP } from 'node:net';
import { GUEST_NETWORK } from '../core/ports.js';
import { IDENTITY_POOL } from './addressing.js';

const SPECIAL_V4 = [
  '0.0.0.0/8', '10.0.0.0/8', '100.64.0.0/10', '127.0.0.0/8', '169.254.0.0/16', '172.16.0.0/12',
  '192.0.0.0/24', '192.0.2.0/24', '192.88.99.0/24', '192.168.0.0/16', '198.18.0.0/15',
  '198.51.100.0/24', '203.0.113.0/24', '224.0.0.0/4', '240.0.0.0/4',
  // Azure's wireserver: the host agent's channel, reachable from every Azure VM like metadata.
  '168.63.129.16/32',
];
/** The gateway's own networks: never dialed, whatever VESSEL_EGRESS_ALLOW_CIDRS says. */
const GATEWAY_V4 = [`${GUEST_NETWORK.gateway}/${GUEST_NETWORK.prefixLength}`, IDENTITY_POOL];
const SPECIAL_V6 = [
  '::/127', '100::/64', '2001:db8::/32', 'fc00::/7', 'fe80::/10', 'ff00::/8', '2001::/32', '2002::/16',
  // IPv4-compatible and IPv4-mapped addresses in any spelling embeddedV4 does not unwrap, the
  // well-known and local-use NAT64 prefixes, and deprecated site-local addresses.
  '::/96', '::ffff:0:0/96', '64:ff9b::/96', '64:ff9b:1::/48', 'fec0::/10',
];

function addCidr(list: BlockList, cidr: string): void {
  const [net, bits] = cidr.split('/');
  const family = isIP(net ?? '');
  const prefix = Number(bits);
  if (family === 0 || !Number.isInteger(prefix) || prefix < 0 || prefix > (family === 4 ? 32 : 128)) {
    throw new Error(`'${cidr}' is not a CIDR range`);
  }
  list.addSubnet(net!, prefix, family === 4 ? 'ipv4' : 'ipv6');
}

/** The IPv4 address inside an IPv4-mapped (::ffff:a.b.c.d) or NAT64 (64:ff9b::a.b.c.d) address. */
function embeddedV4(ip: string): string | null {
  const m = /^(?:::ffff:|64:ff9b::)(?:(\d+\.\d+\.\d+\.\d+)|([0-9a-f]{1,4}):([0-9a-f]{1,4}))$/i.exec(ip);
  if (m === null) return null;
  if (m[1] !== undefined) return m[1];
  const hi = parseInt(m[2]!, 16);
  const lo = parseInt(m[3]!, 16);
  return `${hi >> 8}.${hi & 255}.${lo >> 8}.${lo & 255}`;
}

export class DialPolicy {
  /**
   * One list per family: Node's BlockList checks an IPv4 address against IPv6 rules as if it were
   * IPv4-mapped, so `::ffff:0:0/96` in a shared list would refuse every IPv4 address.
   */
  readonly #special = { ipv4: new BlockList(), ipv6: new BlockList() };
  readonly #allowed = new BlockList();
  readonly #never = new BlockList();
  /** The host's own addresses: special like the ranges above, replaced whole when they change. */
  #host = new BlockList();

  constructor(allowCidrs: readonly string[] = [], hostAddresses: readonly string[] = []) {
    for (const c of GATEWAY_V4) addCidr(this.#never, c);
    for (const c of SPECIAL_V4) addCidr(this.#special.ipv4, c);
    for (const c of SPECIAL_V6) addCidr(this.#special.ipv6, c);
    for (const c of allowCidrs) addCidr(this.#allowed, c);
    this.setHostAddresses(hostAddresses);
  }

  setHostAddresses(addresses: readonly string[]): void {
    const host = new BlockList();
    for (const ip of addresses) {
      const family = isIP(ip);
      if (family !== 0) host.addAddress(ip, family === 4 ? 'ipv4' : 'ipv6');
    }
    this.#host = host;
  }

  /** Whether the gateway may open a connection to `ip`. Anything that is not an IP is refused. */
  mayDial(ip: string): boolean {
    const family = isIP(ip);
    if (family === 0) return false;
    const v4 = family === 6 ? embeddedV4(ip) : ip;
    const [addr, type] = v4 !== null ? [v4, 'ipv4' as const] : [ip, 'ipv6' as const];
    if (this.#never.check(addr, type)) return false;
    if (this.#allowed.check(addr, type)) return true;
    return !this.#special[type].check(addr, type) && !this.#host.check(addr, type);
  }

  /** Addresses a guest cannot route to the gateway itself (its own loopback, link-local, ...). */
  static guestLocal(ip: string): boolean {
    return /^(127\.|0\.|169\.254\.|10\.127\.0\.|22[4-9]\.|23\d\.)/.test(ip);
  }
}

export function parseCidrList(raw: string | undefined): string[] {
  const list = (raw ?? '').split(/[\s,]+/).filter((s) => s !== '');
  for (const c of list) addCidr(new BlockList(), c);
  return list;
}
