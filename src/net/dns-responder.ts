/**
 * The DNS server guests use (their resolver, and any port-53 traffic redirected to it), over UDP
 * and TCP. An allowed name is resolved by the gateway itself and the answer is pinned to the
 * runtime that asked; every other name gets NXDOMAIN. Guests are IPv4-only, so AAAA and other
 * types for an allowed name answer with no records.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, isIP, type Server, type Socket } from 'node:net';
import { normalizeHostName } from '../core/host-pattern.js';
import { DialPolicy } from './blocked-ranges.js';
import type { EgressDecisions } from './egress-decisions.js';
import { listenOn } from './listeners.js';
import type { RuntimeNet, RuntimeRegistry, StandInAddresses } from './runtime-registry.js';
import { ConnectionsPerSource } from './source-caps.js';

const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, NOTIMP: 4, REFUSED: 5 } as const;
/**
 * The largest query a guest may send, over UDP and over TCP alike. A stub resolver's query is a
 * 12-byte header, one name (at most 255 bytes), type and class, and at most one EDNS OPT record
 * (11 bytes plus options: a cookie is 12 to 44): well under 512, the classic UDP limit. EDNS's
 * larger sizes (1232 and up) are about the responses a client can take, not the queries it
 * sends. A bigger message is dropped unread (over TCP the connection is closed), so no guest can
 * make the responder parse more than this many bytes per message.
 */
export const MAX_QUERY_BYTES = 512;
const HEADER_BYTES = 12;
const FLAG_RESPONSE = 0x8000;
const FLAG_RECURSION_DESIRED = 0x0100;
const FLAG_RECURSION_AVAILABLE = 0x0080;
const TYPE_A = 1;
const TYPE_OPT = 41;
const CLASS_IN = 1;
/** What guests may cache an answer for: short, so a changed policy or address shows soon. */
const MAX_ANSWER_TTL = 60;
/** An idle DNS-over-TCP connection is closed after this. */
const TCP_IDLE_MS = 10_000;
/**
 * Queries of one TCP connection being answered at once. A client that sends faster than it reads
 * answers is paused: without this its pipelined queries would pile up answers in memory.
 */
const MAX_PENDING_PER_TCP_CONNECTION = 16;
/** DNS-over-TCP connections one source (one runtime) may hold open: bounds its descriptors. */
export const MAX_TCP_CONNECTIONS_PER_SOURCE = 16;

export interface DnsResponderOptions {
  registry: RuntimeRegistry;
  decisions: EgressDecisions;
  standIns: StandInAddresses;
  activity(net: RuntimeNet): void;
  log: { warn(o: object, m: string): void };
}

export class DnsResponder {
  readonly #udp: UdpSocket = createSocket('udp4');
  readonly #tcp: Server;
  readonly #tcpPerSource = new ConnectionsPerSource(MAX_TCP_CONNECTIONS_PER_SOURCE);

  constructor(private readonly opts: DnsResponderOptions) {
    this.#udp.on('message', (msg, rinfo) => {
      void this.#safeAnswer(msg, rinfo.address).then((reply) => {
        if (reply !== null) this.#udp.send(reply, rinfo.port, rinfo.address);
      });
    });
    this.#udp.on('error', () => undefined);
    this.#tcp = createServer((s) => this.#serveTcp(s));
  }

  async listen(host: string, port: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#udp.once('error', reject);
      this.#udp.bind(port, host, () => resolve());
    });
    await listenOn(this.#tcp, host, port, this.opts.log);
  }

  close(): void {
    this.#udp.close();
    this.#tcp.close();
  }

  /**
   * The reply to one DNS message from `source`, or null to stay silent (too big, not a query).
   * The message is read by parseQuery, in one pass and without following compression pointers:
   * anything but one question (with at most an EDNS OPT record) is FORMERR.
   */
  async answer(message: Buffer, source: string): Promise<Buffer | null> {
    const query = parseQuery(message);
    if (query === null) return null;
    if ('rcode' in query) return encodeReply(query.id, null, query.rcode);
    const reply = (rcode: number, answers: Array<{ ttl: number; ip: string }> = []) => encodeReply(query.id, query.question, rcode, answers);
    const net = this.opts.registry.byIdentity(source);
    if (net === undefined) return reply(RCODE.REFUSED);
    this.opts.activity(net);
    const name = query.name === null ? null : normalizeHostName(query.name);
    if (name === null || !this.opts.decisions.allows(net, name)) return reply(RCODE.NXDOMAIN);
    if (query.type !== TYPE_A) return reply(RCODE.NOERROR);
    const { addresses, ttlSecs, reason } = await this.opts.decisions.dialable(name);
    if (reason === 'unresolvable') return reply(RCODE.NXDOMAIN);
    const ttl = Math.min(ttlSecs, MAX_ANSWER_TTL);
    const answers = addresses.filter((ip) => isIP(ip) === 4).map((realIp) => {
      // A guest cannot send to its own loopback or link-local range through us: show it a stand-in.
      const shown = DialPolicy.guestLocal(realIp) ? this.opts.standIns.for(name) : realIp;
      net.pin(shown, name, realIp);
      return { ttl, ip: shown };
    });
    return reply(RCODE.NOERROR, answers);
  }

  /** answer(), with a failure logged and answered by silence rather than left unhandled. */
  async #safeAnswer(message: Buffer, source: string): Promise<Buffer | null> {
    try {
      return await this.answer(message, source);
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'DNS query failed');
      return null;
    }
  }

  /** DNS over TCP: two-byte length prefixes, several queries per connection. */
  #serveTcp(socket: Socket): void {
    socket.on('error', () => undefined);
    if (!this.#tcpPerSource.admit(socket)) return void socket.destroy();
    const source = socket.remoteAddress ?? '';
    socket.setTimeout(TCP_IDLE_MS, () => socket.destroy());
    const messages = new LengthPrefixed(MAX_QUERY_BYTES);
    let pending = 0;
    socket.on('data', (chunk) => {
      const received = messages.push(chunk);
      // A message longer than any query is not waited for: the connection ends at its prefix.
      if (received === null) return void socket.destroy();
      for (const msg of received) {
        pending++;
        if (pending >= MAX_PENDING_PER_TCP_CONNECTION) socket.pause();
        void this.#safeAnswer(msg, source).then((reply) => {
          pending--;
          if (socket.destroyed) return;
          if (pending < MAX_PENDING_PER_TCP_CONNECTION) socket.resume();
          if (reply === null) return;
          const prefix = Buffer.alloc(2);
          prefix.writeUInt16BE(reply.length);
          socket.write(Buffer.concat([prefix, reply]));
        });
      }
    });
  }
}

/**
 * Splits a TCP stream into messages with two-byte length prefixes. Chunks are kept in a list and
 * joined at most once per message, and a message wholly inside one chunk is a view of it, so the
 * work is linear in the bytes received however they are cut (joining everything so far on every
 * chunk cost quadratic time), and at most one message (`maxMessage` + 2 bytes) is held beyond the
 * chunk being split.
 */
export class LengthPrefixed {
  #chunks: Buffer[] = [];
  #length = 0;
  /** Bytes the message at the front needs with its prefix, once the prefix has arrived. */
  #need: number | null = null;

  constructor(private readonly maxMessage = 65_535) {}

  /** The messages completed by `chunk`; null once a prefix announced more than `maxMessage` bytes. */
  push(chunk: Buffer): Buffer[] | null {
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    const out: Buffer[] = [];
    for (;;) {
      if (this.#need === null) {
        if (this.#length < 2) break;
        const length = this.#front(2).readUInt16BE(0);
        if (length > this.maxMessage) return null;
        this.#need = 2 + length;
      }
      if (this.#length < this.#need) break;
      const front = this.#front(this.#need);
      out.push(front.subarray(2, this.#need));
      this.#drop(this.#need);
      this.#need = null;
    }
    return out;
  }

  /** A buffer starting with the first n bytes held (n <= length): a view when one chunk has them. */
  #front(n: number): Buffer {
    const first = this.#chunks[0]!;
    if (first.length >= n) return first;
    const joined = Buffer.concat(this.#chunks, this.#length);
    this.#chunks = [joined];
    return joined;
  }

  /** Forgets the first n bytes (n <= the first chunk's length, as #front left it). */
  #drop(n: number): void {
    const rest = this.#chunks[0]!.subarray(n);
    if (rest.length === 0) this.#chunks.shift();
    else this.#chunks[0] = rest;
    this.#length -= n;
  }
}

type ParsedQuery =
  | { id: number; rcode: number }
  | { id: number; question: Buffer; name: string | null; type: number };

/**
 * One guest query, read in a single pass over at most MAX_QUERY_BYTES: null when it is to be
 * dropped (too short, too long, or a response), `rcode` when it is refused (NOTIMP for an opcode
 * other than QUERY, FORMERR for anything but exactly one question with no answer or authority
 * records and at most one additional record, an EDNS OPT, ending the message). The question's
 * name must be plain labels: a query has nothing earlier to point to, so a compression pointer
 * is FORMERR, and no pointer is ever followed. `name` is null when a label holds a byte no host
 * name has (a dot, a space, a control byte), so it can never be read as another name.
 */
export function parseQuery(msg: Buffer): ParsedQuery | null {
  if (msg.length < HEADER_BYTES || msg.length > MAX_QUERY_BYTES) return null;
  const id = msg.readUInt16BE(0);
  const flags = msg.readUInt16BE(2);
  if ((flags & FLAG_RESPONSE) !== 0) return null;
  if (((flags >> 11) & 0xf) !== 0) return { id, rcode: RCODE.NOTIMP };
  const formErr = { id, rcode: RCODE.FORMERR };
  const [qd, an, ns, ar] = [msg.readUInt16BE(4), msg.readUInt16BE(6), msg.readUInt16BE(8), msg.readUInt16BE(10)];
  if (qd !== 1 || an !== 0 || ns !== 0 || ar > 1) return formErr;
  const labels: string[] = [];
  let plain = true;
  let p = HEADER_BYTES;
  for (;;) {
    if (p >= msg.length) return formErr;
    const len = msg[p]!;
    p++;
    if (len === 0) break;
    if (len > 63) return formErr; // a pointer (0xc0) or a reserved label type
    if (p + len > msg.length || p + len - HEADER_BYTES > 254) return formErr; // 255 bytes with the final 0
    const label = msg.subarray(p, p + len);
    if (label.some((b) => b <= 0x20 || b === 0x2e || b === 0x7f)) plain = false;
    labels.push(label.toString('utf8'));
    p += len;
  }
  if (p + 4 > msg.length) return formErr;
  const type = msg.readUInt16BE(p);
  p += 4;
  const question = msg.subarray(HEADER_BYTES, p);
  if (ar === 1) {
    // The OPT pseudo-record: root name, type 41, class, TTL, then options filling the rest.
    if (p + 11 > msg.length || msg[p] !== 0 || msg.readUInt16BE(p + 1) !== TYPE_OPT) return formErr;
    p += 11 + msg.readUInt16BE(p + 9);
  }
  if (p !== msg.length) return formErr;
  return { id, question, name: plain ? labels.join('.') : null, type };
}

/** A response to query `id`: its question copied back as it came (if any), then A records pointing to it. */
function encodeReply(id: number, question: Buffer | null, rcode: number, answers: Array<{ ttl: number; ip: string }> = []): Buffer {
  const out = Buffer.alloc(HEADER_BYTES + (question?.length ?? 0) + answers.length * 16);
  out.writeUInt16BE(id, 0);
  out.writeUInt16BE(FLAG_RESPONSE | FLAG_RECURSION_DESIRED | FLAG_RECURSION_AVAILABLE | rcode, 2);
  out.writeUInt16BE(question === null ? 0 : 1, 4);
  out.writeUInt16BE(answers.length, 6);
  let p = HEADER_BYTES;
  if (question !== null) p += question.copy(out, p);
  for (const { ttl, ip } of answers) {
    out.writeUInt16BE(0xc000 | HEADER_BYTES, p); // the name: a pointer to the question's
    out.writeUInt16BE(TYPE_A, p + 2);
    out.writeUInt16BE(CLASS_IN, p + 4);
    out.writeUInt32BE(ttl, p + 6);
    out.writeUInt16BE(4, p + 10);
    ip.split('.').forEach((octet, i) => out.writeUInt8(Number(octet), p + 12 + i));
    p += 16;
  }
  return out;
}
