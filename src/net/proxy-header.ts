/**
 * Who a visitor relayed by an API node's ingress entry really is (docs/scaling.md, "Ingress"):
 * the entry starts each connection to a VM host's ingress with a PROXY protocol v2 header
 * (haproxy's proxy-protocol.txt, §2.2) naming the visitor's address, and signs it for that host,
 * so that the host's per-client caps and X-Forwarded-For apply to the visitor rather than to the
 * API node, through which every visitor comes.
 *
 * The host believes a header only when it carries our signature: one TLV of a type reserved for
 * applications (0xE0) holding the time, a nonce and an HMAC-SHA256 under the cluster secret over
 * the host's name and every byte of the header before the MAC. Anyone can reach a host's ingress
 * port, and a header they made up would let them pass as any address (or fill another visitor's
 * share); a header captured on its way to one host is refused by every other, after a minute, and
 * a second time. Only this one shape is accepted (TCP over IPv4 or IPv6, that TLV and no other), so
 * the parser reads at most MAX_PROXY_HEADER_BYTES, once, with every length fixed in advance.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { readSync } from 'node:fs';
import { isIPv4, isIPv6, type Socket } from 'node:net';
import { clientKey } from '../platform/client-key.js';
import { SeenOnce } from '../platform/seen-once.js';
import { peekBytes, socketFd } from './socket-ops.js';

const SIGNATURE = Buffer.from('\r\n\r\n\0\r\nQUIT\n', 'latin1');
/** Version 2, command PROXY (a relayed connection; LOCAL, a health check, is not one of ours). */
const V2_PROXY = 0x21;
const TCP4 = 0x11;
const TCP6 = 0x21;
const ADDRESS_BYTES = { [TCP4]: 12, [TCP6]: 36 } as const;
/** The TLV that carries our signature: a type the specification leaves to applications. */
const TLV_VESSEL_AUTH = 0xe0;
const TIME_BYTES = 8;
const NONCE_BYTES = 16;
const MAC_BYTES = 32;
const TLV_BYTES = 3 + TIME_BYTES + NONCE_BYTES + MAC_BYTES;
/** The largest header accepted: the fixed 16 bytes, two IPv6 addresses and ports, our TLV. */
export const MAX_PROXY_HEADER_BYTES = 16 + ADDRESS_BYTES[TCP6] + TLV_BYTES;
/** How far a header's time may be from the host's clock (as for the hop). */
const MAX_SKEW_MS = 60_000;
/** The rest of a header, once its first bytes came, must arrive within this (it is sent in one write). */
const HEADER_DEADLINE_MS = 5000;
const PEEK_GAP_MS = 16;
/** How long an address that sent a signed header counts as an API node's (below, `fromFleet`). */
const PEER_MEMORY_MS = 10 * 60_000;

export interface Endpoint {
  address: string;
  port: number;
}

export type ParsedProxyHeader =
  /** The bytes are not the start of a PROXY v2 header. */
  | { kind: 'none' }
  /** They may be: more must come before anything can be said. */
  | { kind: 'incomplete' }
  | { kind: 'bad'; reason: string }
  | { kind: 'ok'; length: number; source: Endpoint; destination: Endpoint; time: number; signed: Buffer; mac: Buffer };

/**
 * Reads a header of our one shape from the start of `buf`. Each length is known from the first
 * 16 bytes, before anything past them is looked at; nothing beyond the header is read.
 */
export function parseProxyHeader(buf: Buffer): ParsedProxyHeader {
  const prefix = Math.min(buf.length, SIGNATURE.length);
  if (buf.length === 0) return { kind: 'incomplete' };
  if (!buf.subarray(0, prefix).equals(SIGNATURE.subarray(0, prefix))) return { kind: 'none' };
  if (buf.length < 16) return { kind: 'incomplete' };
  if (buf[12] !== V2_PROXY) return { kind: 'bad', reason: 'not a PROXY v2 header of a relayed connection' };
  const family = buf[13]!;
  if (family !== TCP4 && family !== TCP6) return { kind: 'bad', reason: 'not TCP over IPv4 or IPv6' };
  const addressBytes = ADDRESS_BYTES[family];
  if (buf.readUInt16BE(14) !== addressBytes + TLV_BYTES) return { kind: 'bad', reason: 'a header of another length than ours' };
  const length = 16 + addressBytes + TLV_BYTES;
  if (buf.length < length) return { kind: 'incomplete' };
  const tlv = 16 + addressBytes;
  if (buf[tlv] !== TLV_VESSEL_AUTH || buf.readUInt16BE(tlv + 1) !== TLV_BYTES - 3) return { kind: 'bad', reason: 'a header without our signature' };
  const ipBytes = family === TCP4 ? 4 : 16;
  const ip = (at: number) => (family === TCP4 ? [...buf.subarray(at, at + 4)].join('.') : ipv6Text(buf.subarray(at, at + 16)));
  const ports = 16 + 2 * ipBytes;
  return {
    kind: 'ok',
    length,
    source: { address: ip(16), port: buf.readUInt16BE(ports) },
    destination: { address: ip(16 + ipBytes), port: buf.readUInt16BE(ports + 2) },
    time: Number(buf.readBigUInt64BE(tlv + 3)),
    signed: buf.subarray(0, length - MAC_BYTES),
    mac: buf.subarray(length - MAC_BYTES, length),
  };
}

const headerMac = (secret: string, node: string, signed: Buffer): Buffer => createHmac('sha256', secret).update(`vessel-ingress-proxy-v1\n${node}\n`).update(signed).digest();

/**
 * The header an ingress entry sends first on a connection it relays to VM host `node`: from
 * `source` (the visitor) to `destination` (where the visitor connected). An IPv4 visitor seen on
 * a dual-stack socket (`::ffff:a.b.c.d`) is sent as IPv4.
 */
export function proxyHeader(secret: string, node: string, source: Endpoint, destination: Endpoint, now = Date.now()): Buffer {
  const src = unmapped(source.address);
  const v4 = isIPv4(src);
  let dst = unmapped(destination.address);
  // Both addresses are of one family in a header: a destination of the other is sent as "any".
  if (isIPv4(dst) !== v4) dst = v4 ? '0.0.0.0' : '::';
  const family = v4 ? TCP4 : TCP6;
  const addressBytes = ADDRESS_BYTES[family];
  const out = Buffer.alloc(16 + addressBytes + TLV_BYTES);
  SIGNATURE.copy(out, 0);
  out[12] = V2_PROXY;
  out[13] = family;
  out.writeUInt16BE(addressBytes + TLV_BYTES, 14);
  const ipBytes = v4 ? 4 : 16;
  ipBytesOf(src, v4).copy(out, 16);
  ipBytesOf(dst, v4).copy(out, 16 + ipBytes);
  out.writeUInt16BE(source.port, 16 + 2 * ipBytes);
  out.writeUInt16BE(destination.port, 18 + 2 * ipBytes);
  const tlv = 16 + addressBytes;
  out[tlv] = TLV_VESSEL_AUTH;
  out.writeUInt16BE(TLV_BYTES - 3, tlv + 1);
  out.writeBigUInt64BE(BigInt(now), tlv + 3);
  randomBytes(NONCE_BYTES).copy(out, tlv + 3 + TIME_BYTES);
  headerMac(secret, node, out.subarray(0, out.length - MAC_BYTES)).copy(out, out.length - MAC_BYTES);
  return out;
}

/**
 * A VM host's side: which connections come from its fleet's ingress entries, and for whom. Only a
 * header signed for this host, in the last minute, never seen before, is believed.
 */
export class ProxiedClients {
  readonly #seen = new SeenOnce(2 * MAX_SKEW_MS);
  /** Peers (as client keys) that sent a signed header lately, until when: the fleet's API nodes. */
  readonly #fleetPeers = new Map<string, number>();

  constructor(private readonly secret: string, private readonly node: string) {}

  /** Why `parsed` is not believed, or null when it is (it is then used up). */
  verify(parsed: Extract<ParsedProxyHeader, { kind: 'ok' }>, now = Date.now()): string | null {
    if (!timingSafeEqual(headerMac(this.secret, this.node, parsed.signed), parsed.mac)) return 'a PROXY header not signed for this host';
    if (Math.abs(now - parsed.time) > MAX_SKEW_MS) return 'a PROXY header over a minute old';
    if (!this.#seen.firstTime(parsed.mac, now)) return 'a PROXY header used before';
    return null;
  }

  /**
   * Whether `socket`'s peer sent a signed header lately. Such a peer's connections are counted
   * under the visitor they carry as soon as their header is read; until then (the header is the
   * first write, so that is a round trip at most) they must not be counted against the API node's
   * own address, or 64 visitors arriving at once through one API node would shut out the 65th.
   */
  fromFleet(socket: Socket, now = Date.now()): boolean {
    return (this.#fleetPeers.get(clientKey(socket.remoteAddress ?? '')) ?? 0) > now;
  }

  /**
   * Takes the PROXY header off the start of a paused socket, consuming exactly its bytes and
   * leaving the rest in the kernel for whoever reads the socket next (a TLS or HTTP server): the
   * visitor it names, null when the socket does not start with one, or why it is refused.
   */
  async take(socket: Socket): Promise<Endpoint | null | string> {
    const deadline = Date.now() + HEADER_DEADLINE_MS;
    for (;;) {
      if (socket.destroyed) return 'the connection closed';
      const buf = peekBytes(socket, MAX_PROXY_HEADER_BYTES);
      if (buf !== null && buf.length === 0) return 'the connection closed';
      const parsed = parseProxyHeader(buf ?? Buffer.alloc(0));
      if (parsed.kind === 'none') return null;
      if (parsed.kind === 'bad') return parsed.reason;
      if (parsed.kind === 'ok') return this.#consume(socket, parsed);
      if (Date.now() >= deadline) return 'a PROXY header that did not arrive whole';
      await new Promise((r) => setTimeout(r, PEEK_GAP_MS));
    }
  }

  #consume(socket: Socket, parsed: Extract<ParsedProxyHeader, { kind: 'ok' }>): Endpoint | string {
    const refused = this.verify(parsed);
    if (refused !== null) return refused;
    // read(2) of exactly the header's length: the bytes are in the kernel (peeked), and Node's
    // stream, which would read ahead into its own buffer, has not started reading this socket.
    const into = Buffer.alloc(parsed.length);
    let got: number;
    try {
      got = readSync(socketFd(socket), into, 0, parsed.length, null);
    } catch (err) {
      return `the PROXY header could not be read (${(err as NodeJS.ErrnoException).code ?? 'error'})`;
    }
    if (got !== parsed.length) return 'the PROXY header could not be read whole';
    const peer = clientKey(socket.remoteAddress ?? '');
    this.#fleetPeers.delete(peer);
    this.#fleetPeers.set(peer, Date.now() + PEER_MEMORY_MS);
    // Insertion order is expiry order: forget the peers not heard from lately.
    for (const [key, until] of this.#fleetPeers) {
      if (until > Date.now()) break;
      this.#fleetPeers.delete(key);
    }
    return parsed.source;
  }
}

const unmapped = (address: string): string => /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1] ?? address;

function ipBytesOf(address: string, v4: boolean): Buffer {
  if (v4) return Buffer.from(address.split('.').map(Number));
  if (!isIPv6(address)) throw new Error(`not an IPv6 address: ${address}`);
  // Expand `::` and a dotted IPv4 tail into 8 groups of 16 bits.
  let text = address.split('%', 1)[0]!;
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted !== null) {
    const [a, b, c, d] = dotted[1]!.split('.').map(Number) as [number, number, number, number];
    text = `${text.slice(0, -dotted[1]!.length)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head = '', tail] = text.split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? headGroups : [...headGroups, ...new Array<string>(8 - headGroups.length - tailGroups.length).fill('0'), ...tailGroups];
  const out = Buffer.alloc(16);
  groups.forEach((g, i) => out.writeUInt16BE(parseInt(g, 16), 2 * i));
  return out;
}

/** An IPv6 address's usual text (RFC 5952: lowercase, the longest run of zero groups as `::`). */
function ipv6Text(bytes: Buffer): string {
  const groups = Array.from({ length: 8 }, (_, i) => bytes.readUInt16BE(2 * i).toString(16));
  const full = groups.join(':');
  // The URL parser writes a host address in exactly that form.
  return new URL(`http://[${full}]/`).hostname.slice(1, -1);
}
