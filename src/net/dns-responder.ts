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

const RCODE = { NOERROR: 0, FORMERR: 1, SERVFAIL: 2, NXDOMAIN: 3, REFUSED: 5 } as const;
/** What guests may cache an answer for: short, so a changed policy or address shows soon. */
const MAX_ANSWER_TTL = 60;
const MAX_TCP_MESSAGE = 65_535;

export interface DnsResponderOptions {
  registry: RuntimeRegistry;
  decisions: EgressDecisions;
  standIns: StandInAddresses;
  activity(net: RuntimeNet): void;
}

export class DnsResponder {
  readonly #udp: UdpSocket = createSocket('udp4');
  readonly #tcp: Server;

  constructor(private readonly opts: DnsResponderOptions) {
    this.#udp.on('message', (msg, rinfo) => {
      void this.answer(msg, rinfo.address).then((reply) => {
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

  /** DNS over TCP: two-byte length prefixes, several queries per connection. */
  #serveTcp(socket: Socket): void {
    let buffered = Buffer.alloc(0);
    socket.setTimeout(10_000, () => socket.destroy());
    socket.on('error', () => undefined);
    socket.on('data', (chunk) => {
      buffered = Buffer.concat([buffered, chunk]);
      while (buffered.length >= 2) {
        const len = buffered.readUInt16BE(0);
        if (len > MAX_TCP_MESSAGE) return void socket.destroy();
        if (buffered.length < 2 + len) break;
        const msg = buffered.subarray(2, 2 + len);
        buffered = buffered.subarray(2 + len);
        void this.answer(msg, socket.remoteAddress ?? '').then((reply) => {
          if (reply === null || socket.destroyed) return;
          const prefix = Buffer.alloc(2);
          prefix.writeUInt16BE(reply.length);
          socket.write(Buffer.concat([prefix, reply]));
        });
      }
    });
  }
}
