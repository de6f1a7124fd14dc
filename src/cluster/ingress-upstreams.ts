/**
 * The connections an API node's ingress entry opens to VM hosts' ingress listeners for one
 * client connection (ingress-entry.ts). Each starts with a PROXY v2 header signed for its host
 * that names the visitor (src/net/proxy-header.ts), so a connection carries one visitor's
 * requests to one host, and is kept alive for that client connection's next requests to the
 * same host: a proxy in front (ingress-nginx) that sends requests for runtimes on several hosts
 * down one kept-alive connection gets one upstream connection per host, not one per request.
 *
 * A request the entry forwards as `https` (its client's proxy terminated TLS and said so) goes
 * to the host over TLS, verified against the fleet's CA, with the request's host name as SNI:
 * the host then serves it exactly as a TLS client's request to an https spec.
 */
import { Agent, type ClientRequestArgs } from 'node:http';
import { connect as netConnect, type Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import { connect as tlsConnect } from 'node:tls';
import { proxyHeader } from '../net/proxy-header.js';
import type { FleetKeys } from './fleet-keys.js';

/** A runtime's VM host: its name (the PROXY header is signed for it) and its ingress address. */
export interface HostTarget {
  node: string;
  host: string;
  port: number;
}

export interface Endpoint {
  address: string;
  port: number;
}

/** Where and how one request goes: the host, the visitor it is for, and `servername` when over TLS. */
export interface UpstreamKey {
  to: HostTarget;
  visitor: Endpoint;
  /** The address the visitor (or its proxy) reached this entry at, for the header's destination. */
  entered: Endpoint;
  /** The name the request is for, as SNI and the certificate's name; null for plain HTTP. */
  servername: string | null;
}

const CONNECT_TIMEOUT_MS = 5000;
/**
 * An idle upstream connection is let go before the host's ingress would close it (Node's server
 * keep-alive, 5 s): a request sent on a connection the host is closing fails with a reset.
 */
export const UPSTREAM_IDLE_MS = 4000;
/**
 * Upstream connections one client connection may hold (one per host, visitor and TLS name it
 * sent requests for): bounds what a client naming many runtimes can make this API node hold.
 * The least recently used one goes first; a request still on it fails (503), which only a client
 * pipelining to more than this many hosts or visitors at once meets.
 */
export const MAX_UPSTREAMS_PER_CLIENT = 8;

export interface UpstreamOptions {
  keys: FleetKeys;
  /** The fleet CA's certificate (PEM), which hosts' https leaves are signed by. */
  fleetCa: () => Promise<string>;
}

/**
 * Opens a connection to `key.to`, writes the PROXY header, and (for TLS) starts TLS after it;
 * calls back once the header is in the kernel's hands, with the stream to send HTTP on.
 */
export function openUpstream(opts: UpstreamOptions, key: UpstreamKey, done: (err: Error | null, stream?: Duplex) => void): void {
  let header: Buffer;
  try {
    header = proxyHeader(opts.keys.keyOf(key.to.node), key.to.node, key.visitor, key.entered);
  } catch (err) {
    return done(err as Error);
  }
  const raw: Socket = netConnect({ host: key.to.host, port: key.to.port, noDelay: true, timeout: CONNECT_TIMEOUT_MS });
  const fail = (err: Error) => {
    raw.destroy();
    done(err);
  };
  raw.once('timeout', () => fail(new Error('connect timeout')));
  raw.once('error', fail);
  raw.once('connect', () => {
    raw.setTimeout(0);
    raw.write(header, (err) => {
      if (err) return fail(err);
      raw.off('error', fail);
      if (key.servername === null) return done(null, raw);
      opts.fleetCa().then(
        (ca) => {
          const tls = tlsConnect({ socket: raw, servername: key.servername!, ca, ALPNProtocols: ['http/1.1'] });
          const tlsFailed = (e: Error) => {
            tls.destroy();
            done(e);
          };
          tls.once('error', tlsFailed);
          tls.once('secureConnect', () => {
            tls.off('error', tlsFailed);
            done(null, tls);
          });
        },
        (e: Error) => fail(e),
      );
    });
  });
}

/** Keeps one connection alive per key, and makes each start with the key's PROXY header. */
class UpstreamAgent extends Agent {
  constructor(private readonly opts: UpstreamOptions, private readonly key: UpstreamKey) {
    super({ keepAlive: true, maxSockets: 1, maxFreeSockets: 1, timeout: UPSTREAM_IDLE_MS });
  }

  override createConnection(_options: ClientRequestArgs, callback?: (err: Error | null, stream: Duplex) => void): undefined {
    openUpstream(this.opts, this.key, (err, stream) => callback?.(err, stream as Duplex));
    return undefined;
  }
}

/** One client connection's upstream connections, by key; all closed with it. */
export class ClientUpstreams {
  readonly #agents = new Map<string, UpstreamAgent>();
  /** Agents let go (evicted, or all at close): a request that fails on one is not sent again. */
  readonly #retired = new WeakSet<Agent>();
  #closed = false;

  constructor(private readonly opts: UpstreamOptions) {}

  /** The agent whose connection carries requests for `key`; null once the client's connection closed. */
  agentFor(key: UpstreamKey): Agent | null {
    if (this.#closed) return null;
    const name = `${key.to.node}\0${key.to.host}\0${key.to.port}\0${key.visitor.address}\0${key.servername ?? ''}`;
    let agent = this.#agents.get(name);
    if (agent !== undefined) {
      // Most recently used last: the first is the one to let go.
      this.#agents.delete(name);
    } else {
      agent = new UpstreamAgent(this.opts, key);
      if (this.#agents.size >= MAX_UPSTREAMS_PER_CLIENT) {
        const [oldest, old] = this.#agents.entries().next().value!;
        this.#agents.delete(oldest);
        this.#retired.add(old);
        old.destroy();
      }
    }
    this.#agents.set(name, agent);
    return agent;
  }

  /** Whether `agent` was let go: what failed on it failed because of that, not because its host closed an idle connection. */
  retired(agent: Agent): boolean {
    return this.#closed || this.#retired.has(agent);
  }

  close(): void {
    this.#closed = true;
    for (const agent of this.#agents.values()) {
      this.#retired.add(agent);
      agent.destroy();
    }
    this.#agents.clear();
  }
}
