/**
 * The fleet's ingress entry point, on every API node (docs/scaling.md, "Ingress"): a connection
 * for `<port>-<runtime id>.<domain>` is joined, bytes untouched, to the ingress listener of the VM
 * host that runs that runtime, which then does all it does on a single host (routing by Host per
 * request, TLS with its CA, request framing, deadlines). The entry reads nothing: it peeks at the
 * first request head or the ClientHello, decides on its name, and hands both sockets to the native
 * relay. A connection stays with the host of its first request: each runtime's URL is an origin
 * of its own, so clients do not share connections between them.
 *
 * Every connection to a host starts with a PROXY v2 header signed for that host, naming the
 * visitor (proxy-header.ts): the host counts its per-client caps by the visitor, not by this API
 * node's address, which every visitor of this entry shares, and tells the runtime who it is
 * (X-Forwarded-For).
 *
 * Everything here comes from unauthenticated clients: the same caps as a host's ingress, bounded
 * peeks, a deadline for the head, and nothing forwarded before the route is known.
 */
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import type { NodeDirectory } from '../core/node-directory.js';
import type { Store } from '../core/ports.js';
import type { Logger } from '../core/runtimes.js';
import { MAX_INGRESS_CONNECTIONS, MAX_INGRESS_CONNECTIONS_PER_SOURCE, parseIngressHost } from '../net/ingress.js';
import { listenOn } from '../net/listeners.js';
import { closeRelays, peekBytes, relaySockets, sniffSocket } from '../net/socket-ops.js';
import { ConnectionsPerSource } from '../net/source-caps.js';
import { proxyHeader } from '../net/proxy-header.js';
import type { FleetKeys } from './fleet-keys.js';

/** The longest request head the entry reads ahead for its Host (a host's ingress takes the same). */
export const MAX_ENTRY_HEAD_BYTES = 16 * 1024;
const SILENT_MS = 10_000;
/** The rest of a request head, once it began, must arrive within this. */
const HEAD_DEADLINE_MS = 5000;
const PEEK_GAP_MS = 16;
const CONNECT_TIMEOUT_MS = 5000;
const KEEPALIVE_MS = 60_000;
/** Groups this entry's relays, to reset them all at close. */
const RELAY_TAG = 0x1e5;

/** The Host of a request head: exactly one, or null (none, two, or no complete head). */
export function hostOfHead(head: Buffer): string | null {
  const end = head.indexOf('\r\n\r\n');
  if (end === -1) return null;
  const hosts = head
    .toString('latin1', 0, end)
    .split('\r\n')
    .slice(1)
    .filter((line) => /^host[ \t]*:/i.test(line));
  return hosts.length === 1 ? hosts[0]!.slice(hosts[0]!.indexOf(':') + 1).trim() : null;
}

export class IngressEntry {
  readonly #server: Server;
  readonly #perSource = new ConnectionsPerSource(MAX_INGRESS_CONNECTIONS_PER_SOURCE, MAX_INGRESS_CONNECTIONS);

  constructor(
    private readonly store: Store,
    private readonly nodes: NodeDirectory,
    private readonly domain: string,
    /** Every host's key, from the fleet secret: a PROXY header is signed with the key of the host it goes to. */
    private readonly keys: FleetKeys,
    private readonly log: Logger,
  ) {
    this.#server = createServer({ pauseOnConnect: true }, (socket) => {
      socket.on('error', () => undefined);
      // Counted until the connection ends, relayed or not: the host counts its clients across all
      // entries, this keeps one client from using up this API node's own descriptors.
      const release = this.#perSource.hold(socket);
      if (release === null) return void socket.destroy();
      socket.once('close', release);
      this.#serve(socket, release).catch((err: unknown) => {
        this.log.warn({ err: (err as Error).message }, 'ingress entry connection failed');
        socket.destroy();
      });
    });
  }

  listen = (host: string, port: number): Promise<void> => listenOn(this.#server, host, port, this.log);

  close = async (): Promise<void> => {
    await closeRelays(RELAY_TAG);
    await new Promise((r) => this.#server.close(r));
  };

  async #serve(socket: Socket, release: () => void): Promise<void> {
    const first = await sniffSocket(socket, SILENT_MS);
    if (socket.destroyed) return;
    if (first.kind === 'tls') {
      const to = first.sni === null ? null : await this.#hostFor(first.sni);
      // A TLS client gets no answer it could read without a certificate: the connection just ends.
      if (to === null || typeof to === 'string') return void socket.destroy();
      return this.#join(socket, to, release);
    }
    if (first.kind !== 'http') return refuse(socket, 400, 'not an HTTP request or a TLS ClientHello');
    const host = await this.#hostHeader(socket);
    if (host === null) return refuse(socket, 400, 'a request head with exactly one Host header is required');
    const to = await this.#hostFor(host);
    if (to === null) return refuse(socket, 404, `no runtime is exposed at '${host.slice(0, 300)}'`);
    if (typeof to === 'string') return refuse(socket, 503, to);
    this.#join(socket, to, release);
  }

  /** Peeks until the first request head is whole; null when it is not within the bound and the deadline. */
  async #hostHeader(socket: Socket): Promise<string | null> {
    const deadline = Date.now() + HEAD_DEADLINE_MS;
    while (!socket.destroyed && Date.now() < deadline) {
      const buf = peekBytes(socket, MAX_ENTRY_HEAD_BYTES);
      if (buf !== null && buf.length === 0) return null;
      if (buf !== null && buf.includes('\r\n\r\n')) return hostOfHead(buf);
      if (buf !== null && buf.length >= MAX_ENTRY_HEAD_BYTES) return null;
      await new Promise((r) => setTimeout(r, PEEK_GAP_MS));
    }
    return null;
  }

  /** The VM host's ingress address for a name; null when no runtime is there, a reason when its host is away. */
  async #hostFor(name: string): Promise<Target | string | null> {
    const target = parseIngressHost(name, this.domain);
    if (target === null) return null;
    const rt = await this.store.runtimes.findById(target.runtimeId);
    if (rt === undefined || rt.node === null) return null;
    const node = await this.nodes.find(rt.node);
    if (node === undefined || node.ingressAddress === null) return null;
    if (!node.alive) return `the VM host of runtime ${rt.id} holds no lease`;
    const at = node.ingressAddress.lastIndexOf(':');
    return { node: node.name, host: node.ingressAddress.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(node.ingressAddress.slice(at + 1)) };
  }

  /** Joins the client, unread bytes and all, to the host's ingress on the native relay thread; the cap's count goes when the relay ends. */
  #join(socket: Socket, to: Target, release: () => void): void {
    const upstream = createConnection({ host: to.host, port: to.port, noDelay: true, timeout: CONNECT_TIMEOUT_MS });
    // Not a byte may be read into Node's buffers before the relay takes over.
    upstream.pause();
    upstream.once('timeout', () => upstream.destroy(new Error('connect timeout')));
    upstream.once('connect', () => {
      if (socket.destroyed) return void upstream.destroy();
      upstream.setTimeout(0);
      const visitor = { address: socket.remoteAddress ?? '', port: socket.remotePort ?? 0 };
      const entered = { address: socket.localAddress ?? '', port: socket.localPort ?? 0 };
      let header: Buffer;
      try {
        header = proxyHeader(this.keys.keyOf(to.node), to.node, visitor, entered);
      } catch {
        // No address to name (the visitor is gone): nothing to relay.
        socket.destroy();
        return void upstream.destroy();
      }
      // The header first, and the relay only once it is in the kernel's hands: the relay takes
      // the descriptors, and a write still queued in Node would be lost, or land after the visitor's bytes.
      upstream.write(header, (err) => {
        if (err) upstream.destroy();
        else this.#relay(socket, upstream, release);
      });
    });
    upstream.on('error', () => {
      if (!socket.destroyed) refuse(socket, 503, 'the VM host of this runtime is not answering');
    });
    socket.once('close', () => upstream.destroy());
  }

  #relay(socket: Socket, upstream: Socket, release: () => void): void {
    if (socket.destroyed || upstream.destroyed) return void upstream.destroy();
    // A peer that vanishes must not pin the relay forever.
    socket.setKeepAlive(true, KEEPALIVE_MS);
    upstream.setKeepAlive(true, KEEPALIVE_MS);
    socket.off('close', release);
    try {
      relaySockets(socket, upstream, RELAY_TAG, release);
    } catch (err) {
      // dup() fails with EMFILE when descriptors run out: this connection ends, not the API node.
      this.log.warn({ err: (err as Error).message }, 'ingress entry relay failed');
      release();
      socket.resetAndDestroy();
      upstream.destroy();
    }
  }
}

/** A runtime's VM host: its name (the PROXY header is signed for it) and its ingress address. */
interface Target {
  node: string;
  host: string;
  port: number;
}

function refuse(socket: Socket, status: 400 | 404 | 503, message: string): void {
  const code = status === 404 ? 'not_found' : status === 400 ? 'invalid_argument' : 'unavailable';
  const body = JSON.stringify({ error: { code, message } });
  const reason = status === 404 ? 'Not Found' : status === 400 ? 'Bad Request' : 'Service Unavailable';
  socket.end(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`);
}
