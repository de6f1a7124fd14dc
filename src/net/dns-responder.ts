/**
 * The DNS server guests use (their resolver, and any port-53 traffic redirected to it), over UDP
 * and TCP. An allowed name is resolved by the gateway itself and the answer is pinned to the
 * runtime that asked; every other name gets NXDOMAIN. Guests are IPv4-only, so AAAA and other
 * types for an allowed name answer with no records.
 */
import { createSocket, type Socket as UdpSocket } from 'node:dgram';
import { createServer, type Server, type Socket } from 'node:net';
import * as dns from 'dns-packet';
import { normalizeHostName } from '../core/host-pattern.js';
import { DialPolicy } from './blocked-ranges.js';
import type { EgressDecisions } from './egress-decisions.js';
import { listenOn } from './listeners.js';
import type { RuntimeNet, RuntimeRegistry, StandInAddresses } from './runtime-registry.js';
import { ConnectionsPerSource } from './source-caps.js';

const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, REFUSED: 5 } as const;
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
    await listenOn(this.#tcp, host, port);
  }

  close(): void {
    this.#udp.close();
    this.#tcp.close();
  }

  /** The reply to one DNS message from `source`, or null to stay silent (not a query, not ours). */
  async answer(message: Buffer, source: string): Promise<Buffer | null> {
    let query: dns.DecodedPacket;
    try {
      query = dns.decode(message);
    } catch {
      return null;
    }
    if (query.type !== 'query') return null;
    const reply = (rcode: number, answers: dns.Answer[] = []) =>
      dns.encode({ type: 'response', id: query.id, flags: dns.RECURSION_DESIRED | dns.RECURSION_AVAILABLE | rcode, questions: query.questions, answers });
    const net = this.opts.registry.byIdentity(source);
    if (net === undefined) return reply(RCODE.REFUSED);
    this.opts.activity(net);
    const question = query.questions?.[0];
    if (question === undefined || query.questions!.length !== 1) return reply(RCODE.FORMERR);
    const name = normalizeHostName(question.name);
    if (name === null || !this.opts.decisions.allows(net, name)) return reply(RCODE.NXDOMAIN);
    if (question.type !== 'A') return reply(RCODE.NOERROR);
    const { addresses, ttlSecs, reason } = await this.opts.decisions.dialable(name);
    if (reason === 'unresolvable') return reply(RCODE.NXDOMAIN);
    const ttl = Math.min(ttlSecs, MAX_ANSWER_TTL);
    const answers: dns.Answer[] = addresses.map((realIp) => {
      // A guest cannot send to its own loopback or link-local range through us: show it a stand-in.
      const shown = DialPolicy.guestLocal(realIp) ? this.opts.standIns.for(name) : realIp;
      net.pin(shown, name, realIp);
      return { type: 'A', name: question.name, ttl, data: shown };
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
    const messages = new LengthPrefixed();
    let pending = 0;
    socket.on('data', (chunk) => {
      for (const msg of messages.push(chunk)) {
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
 * chunk cost quadratic time), and at most one message (65,537 bytes) is held beyond the chunk
 * being split.
 */
export class LengthPrefixed {
  #chunks: Buffer[] = [];
  #length = 0;
  /** Bytes the message at the front needs with its prefix, once the prefix has arrived. */
  #need: number | null = null;

  push(chunk: Buffer): Buffer[] {
    this.#chunks.push(chunk);
    this.#length += chunk.length;
    const out: Buffer[] = [];
    for (;;) {
      if (this.#need === null) {
        if (this.#length < 2) break;
        this.#need = 2 + this.#front(2).readUInt16BE(0);
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
