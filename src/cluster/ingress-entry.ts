/**
 * The fleet's ingress entry point, on every API node (docs/scaling.md, "Ingress"): requests for
 * `<port>-<runtime id>.<domain>` go on to the ingress listener of the VM host that runs that
 * runtime, which then does all it does on a single host (routing to the guest, TLS with its CA,
 * the guest's deadlines).
 *
 * Plain HTTP is routed per request: a proxy in front (ingress-nginx) reuses its kept-alive
 * connections to this entry for requests to any runtime, so each request is parsed (Node's
 * parser, with the head bounded), routed by its own Host, and sent with its body framed
 * explicitly (forwarded-headers.ts) on a connection to its host that this client connection
 * keeps (ingress-upstreams.ts). An upgrade (WebSocket) gets a connection of its own, and its
 * bytes are spliced both ways once the host answered 101. A TLS client is routed by its SNI and
 * joined, bytes untouched, to the host on the native relay thread: its requests are encrypted to
 * a name of its own, and the host checks each of them.
 *
 * Every connection to a host starts with a PROXY v2 header signed for that host, naming the
 * visitor (proxy-header.ts): the host counts its per-client caps by the visitor, not by this API
 * node's address, which every visitor of this entry shares, and tells the runtime who it is
 * (X-Forwarded-For). Behind a trusted proxy (VESSEL_TRUSTED_PROXIES, as for the API), the visitor
 * is the client its X-Forwarded-For names, and its X-Forwarded-Proto `https` sends the request to
 * the host over TLS, so that `https` specs are served behind a proxy that terminated TLS.
 *
 * Everything here comes from unauthenticated clients: the same caps as a host's ingress, bounded
 * heads and peeks, deadlines (request-deadlines.ts), and nothing forwarded before the route is known.
 */
import proxyAddr from '@fastify/proxy-addr';
import { createServer as createHttpServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { createConnection, createServer, isIP, type Server, type Socket } from 'node:net';
import { pipeline, type Duplex } from 'node:stream';
import type { NodeDirectory } from '../core/node-directory.js';
import type { Store } from '../core/ports.js';
import type { Logger } from '../core/runtimes.js';
import type { IngressSpec } from '../core/types.js';
import { endToEndHeaders, headerValues, requestFraming, responseLength, writeRelayedHead } from '../net/forwarded-headers.js';
import { MAX_INGRESS_CONNECTIONS, MAX_INGRESS_CONNECTIONS_PER_SOURCE, parseIngressHost } from '../net/ingress.js';
import { closeListener, listenOn } from '../net/listeners.js';
import { RequestDeadlines, type RequestDeadlineOptions } from '../net/request-deadlines.js';
import { closeRelays, relaySockets, sniffSocket } from '../net/socket-ops.js';
import { ConnectionsPerSource } from '../net/source-caps.js';
import { proxyHeader } from '../net/proxy-header.js';
import type { FleetKeys } from './fleet-keys.js';
import { LastKnown } from './last-known.js';
import { ClientUpstreams, openUpstream, type Endpoint, type HostTarget, type UpstreamKey, type UpstreamOptions } from './ingress-upstreams.js';

/** The longest request head the entry reads (a host's ingress takes the same). */
export const MAX_ENTRY_HEAD_BYTES = 16 * 1024;
const SILENT_MS = 10_000;
const CONNECT_TIMEOUT_MS = 5000;
const KEEPALIVE_MS = 60_000;
/**
 * How long a client connection may stay idle between requests. Longer than the keep-alive of a
 * proxy's upstream connections (nginx's and ingress-nginx's `keepalive_timeout` 60 s): the proxy
 * must be the one to close an idle connection, or it may send a request on one this entry is
 * closing, and answer its client 502.
 */
export const ENTRY_KEEPALIVE_MS = 75_000;
/** Methods that change nothing (RFC 9110 §9.2.2's safe ones): the only ones sent again after a kept connection failed. */
const REPEATABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
/**
 * Requests of one client connection taken up and not yet answered. Node's server parses
 * pipelined requests as they come while a host is slow; past this many, the connection is not
 * read until an answer goes out, so one client holds a bounded number of lookups and requests.
 */
export const MAX_PENDING_PER_CLIENT = 16;
/** Groups this entry's relays, to reset them all at close. */
const RELAY_TAG = 0x1e5;

export interface IngressEntryOptions extends RequestDeadlineOptions {
  store: Store;
  nodes: NodeDirectory;
  domain: string;
  /** Every host's key, from the fleet secret: a PROXY header is signed with the key of the host it goes to. */
  keys: FleetKeys;
  /** The fleet CA's certificate, which hosts' https leaves are signed by: for requests forwarded as https. */
  fleetCa: () => Promise<string>;
  /** Peers whose X-Forwarded-For and X-Forwarded-Proto are believed (VESSEL_TRUSTED_PROXIES); empty: none. */
  trustedProxies: readonly string[];
  log: Logger;
}

/** A request's route: its host, or the status and message it is answered with here. */
type Routed = HostTarget | { status: 400 | 404 | 503; message: string };

export class IngressEntry {
  readonly #server: Server;
  readonly #http = createHttpServer({ requireHostHeader: true, maxHeaderSize: MAX_ENTRY_HEAD_BYTES });
  readonly #perSource = new ConnectionsPerSource(MAX_INGRESS_CONNECTIONS_PER_SOURCE, MAX_INGRESS_CONNECTIONS);
  readonly #deadlines: RequestDeadlines;
  readonly #trust: (address: string, hop: number) => boolean;
  readonly #upstreamOptions: UpstreamOptions;
  /** Each plain HTTP client connection's connections to hosts. */
  readonly #upstreams = new WeakMap<Socket, ClientUpstreams>();
  /** Each runtime's host and ports as last read, for requests to it while the store is away. */
  readonly #routes = new LastKnown<{ id: string; node: string | null; ingressSpecs: IngressSpec[] }>();
  /** Each plain HTTP client connection's requests not yet answered (MAX_PENDING_PER_CLIENT). */
  readonly #pending = new WeakMap<Socket, number>();

  constructor(private readonly opts: IngressEntryOptions) {
    this.#trust = opts.trustedProxies.length === 0 ? () => false : proxyAddr.compile([...opts.trustedProxies]);
    this.#upstreamOptions = { keys: opts.keys, fleetCa: opts.fleetCa };
    this.#deadlines = new RequestDeadlines(opts, ENTRY_KEEPALIVE_MS);
    this.#http.keepAliveTimeout = ENTRY_KEEPALIVE_MS;
    this.#http.on('request', (req: IncomingMessage, res: ServerResponse) => {
      this.#deadlines.request(req.socket, req, res);
      if (!this.#holdPending(req.socket, res)) return;
      this.#forward(req, res).catch((err: unknown) => this.#failed(req.socket, err));
    });
    this.#http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      this.#deadlines.release(socket);
      this.#upgrade(req, socket, head).catch((err: unknown) => this.#failed(socket, err));
    });
    this.#http.on('clientError', (_err, socket: Socket) => socket.destroy());
    this.#server = createServer({ pauseOnConnect: true }, (socket) => {
      socket.on('error', () => undefined);
      // Counted until the connection ends, relayed or not: the host counts its clients across all
      // entries, this keeps one client from using up this API node's own descriptors. A trusted
      // proxy carries every visitor's requests: it is held to the total alone.
      const trusted = this.#trust(socket.remoteAddress ?? '', 0);
      const release = this.#perSource.hold(socket, trusted ? MAX_INGRESS_CONNECTIONS : MAX_INGRESS_CONNECTIONS_PER_SOURCE);
      if (release === null) return void socket.destroy();
      socket.once('close', release);
      this.#deadlines.admit(socket);
      this.#accept(socket, release).catch((err: unknown) => this.#failed(socket, err));
    });
  }

  listen = async (host: string, port: number): Promise<void> => {
    await listenOn(this.#server, host, port, this.opts.log);
    this.#deadlines.start();
  };

  close = async (): Promise<void> => {
    this.#deadlines.stop();
    await closeRelays(RELAY_TAG);
    await closeListener(this.#server, this.#http);
  };

  /**
   * Counts a request until its answer is finished or abandoned, and pauses its connection while
   * too many are. Requests already read in one chunk are parsed before the pause takes: past
   * four times the bound, the connection is closed, and false says not to take the request up.
   */
  #holdPending(socket: Socket, res: ServerResponse): boolean {
    const pending = (this.#pending.get(socket) ?? 0) + 1;
    this.#pending.set(socket, pending);
    if (pending > 4 * MAX_PENDING_PER_CLIENT) {
      socket.destroy();
      return false;
    }
    if (pending >= MAX_PENDING_PER_CLIENT) socket.pause();
    let done = false;
    const settle = (): void => {
      if (done) return;
      done = true;
      const left = (this.#pending.get(socket) ?? 1) - 1;
      this.#pending.set(socket, left);
      if (left < MAX_PENDING_PER_CLIENT && !socket.destroyed) socket.resume();
    };
    res.once('finish', settle);
    res.once('close', settle);
    return true;
  }

  #failed(socket: Socket, err: unknown): void {
    this.opts.log.warn({ err: (err as Error).message }, 'ingress entry connection failed');
    socket.destroy();
  }

  async #accept(socket: Socket, release: () => void): Promise<void> {
    const first = await sniffSocket(socket, SILENT_MS);
    if (socket.destroyed) return;
    if (first.kind === 'tls') {
      const to = first.sni === null ? null : await this.#hostFor(first.sni, 'https');
      // A TLS client gets no answer it could read without a certificate: the connection just ends.
      if (to === null || 'status' in to) return void socket.destroy();
      this.#deadlines.release(socket);
      return this.#join(socket, to, release);
    }
    if (first.kind !== 'http') return void socket.end(answer(400, 'not an HTTP request or a TLS ClientHello'));
    const upstreams = new ClientUpstreams(this.#upstreamOptions);
    this.#upstreams.set(socket, upstreams);
    socket.once('close', () => upstreams.close());
    this.#http.emit('connection', socket);
    socket.resume();
  }

  /**
   * The VM host's ingress address for a name reached over `protocol`, or why the request is
   * answered here: a port the runtime does not expose over that protocol is not found, as on a
   * single host (the host checks again; this spares it the connection).
   */
  async #hostFor(name: string, protocol: 'http' | 'https'): Promise<Routed> {
    const notFound = { status: 404, message: `no runtime exposes ${protocol} at '${name.slice(0, 300)}'` } as const;
    const target = parseIngressHost(name, this.opts.domain);
    if (target === null) return notFound;
    const rt = await this.#routes.get(target.runtimeId, async () => {
      const found = await this.opts.store.runtimes.findById(target.runtimeId);
      return found === undefined ? undefined : { id: found.id, node: found.node, ingressSpecs: found.ingressSpecs };
    });
    if (rt === undefined || rt.node === null) return notFound;
    if (!rt.ingressSpecs.some((spec) => spec.runtime_port === target.port && spec.protocol === protocol)) return notFound;
    const node = await this.opts.nodes.find(rt.node);
    if (node === undefined || node.ingressAddress === null) return notFound;
    if (!node.alive) return { status: 503, message: `the VM host of runtime ${rt.id} holds no lease` };
    const at = node.ingressAddress.lastIndexOf(':');
    return { node: node.name, host: node.ingressAddress.slice(0, at).replace(/^\[|\]$/g, ''), port: Number(node.ingressAddress.slice(at + 1)) };
  }

  /** Where a request goes, and as whom; or why it is answered here. */
  async #route(req: IncomingMessage): Promise<{ key: UpstreamKey; host: string } | { status: 400 | 404 | 503; message: string }> {
    const hosts = headerValues(req.rawHeaders, 'host');
    if (hosts.length !== 1) return { status: 400, message: 'exactly one Host header is required' };
    // Only origin-form targets: an absolute URI names a host of its own beside the Host header.
    if (!(req.url ?? '').startsWith('/')) return { status: 400, message: 'the request target must be a path' };
    if (requestFraming(req.headers) === null) return { status: 400, message: 'the request body cannot be forwarded with its transfer coding' };
    const host = hosts[0]!;
    const socket = req.socket;
    const trusted = this.#trust(socket.remoteAddress ?? '', 0);
    const https = trusted && forwardedHttps(req);
    const to = await this.#hostFor(host, https ? 'https' : 'http');
    if ('status' in to) return to;
    // The client a trusted proxy names; a name that is no address is not one to sign for.
    const named = trusted ? proxyAddr(req, this.#trust) : '';
    const visitor: Endpoint = isIP(named) !== 0 && named !== socket.remoteAddress ? { address: named, port: 0 } : { address: socket.remoteAddress ?? '', port: socket.remotePort ?? 0 };
    const entered: Endpoint = { address: socket.localAddress ?? '', port: socket.localPort ?? 0 };
    const servername = https ? host.replace(/:\d{1,5}$/, '').replace(/\.$/, '').toLowerCase() : null;
    return { key: { to, visitor, entered, servername }, host };
  }

  /** The request's headers for the host: one Host, explicit framing, nothing hop-by-hop. */
  #headersFor(req: IncomingMessage, host: string): string[] {
    return ['Host', host, ...endToEndHeaders(req.rawHeaders), ...(requestFraming(req.headers) ?? [])];
  }

  async #forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const route = await this.#route(req);
    // An answer of ours keeps the connection when there is no body left to read on it.
    if ('status' in route) return void answerWith(res, route.status, route.message, requestFraming(req.headers)?.length !== 0);
    const upstreams = this.#upstreams.get(req.socket);
    if (upstreams === undefined || req.socket.destroyed) return;
    const headers = this.#headersFor(req, route.host);
    const send = (retry: boolean): void => {
      const agent = upstreams.agentFor(route.key);
      if (agent === null) return void res.destroy();
      const upstream = request({ host: route.key.to.host, port: route.key.to.port, method: req.method, path: req.url, headers, setHost: false, agent }, (up) => {
        // The host made every cookie host-only already; its answer is passed on as it is.
        if (!writeRelayedHead(res, up.statusCode, up.statusMessage, [...endToEndHeaders(up.rawHeaders), ...responseLength(up.headers)])) {
          up.destroy();
          return answerWith(res, 502, 'the VM host sent a response that cannot be passed on', true);
        }
        // A response cut short closes the client's connection rather than leave it mid-message.
        pipeline(up, res, () => undefined);
      });
      upstream.on('error', (err: NodeJS.ErrnoException) => {
        // A kept connection the host closed as idle while this request went out (it read none of
        // it, or it would have answered): a request that is safe to repeat, without a body, is
        // sent once more on a new one. Not when the connection was ours to close (the client left,
        // or its agent was let go): the host may have the request already.
        const idleClosed = upstream.reusedSocket && (err.code === 'ECONNRESET' || err.code === 'EPIPE') && !upstreams.retired(agent) && !req.socket.destroyed;
        if (retry && idleClosed && !res.headersSent && REPEATABLE_METHODS.has(req.method ?? '') && requestFraming(req.headers)?.length === 0) return send(false);
        if (res.headersSent) return void res.destroy();
        answerWith(res, 503, 'the VM host of this runtime is not answering', true);
      });
      // A request body cut short must not leave a half-sent request on a kept connection.
      req.on('close', () => req.complete || upstream.destroy());
      // The head goes at once, not with the body's first bytes: the guest may answer before it reads the body.
      upstream.flushHeaders();
      req.pipe(upstream);
    };
    send(true);
  }

  /**
   * An upgrade (WebSocket): its head goes to the host on a connection of its own, and only once
   * the host answers 101 do bytes flow both ways, spliced. Until then nothing more of the
   * client's is sent, so requests pipelined behind a refused upgrade are never delivered
   * undecided. A refusal is passed on, and the connection ends.
   */
  async #upgrade(req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    socket.on('error', () => undefined);
    // Only the head goes before the host's 101: a body announced with an upgrade would never follow it.
    if (requestFraming(req.headers)?.length !== 0) return void socket.end(answer(400, 'an upgrade request has no body'));
    const route = await this.#route(req);
    if ('status' in route) return void socket.end(answer(route.status, route.message));
    if (socket.destroyed) return;
    const headers = [...this.#headersFor(req, route.host), 'Connection', 'Upgrade', 'Upgrade', req.headers.upgrade ?? ''];
    const upstream = request({
      host: route.key.to.host,
      port: route.key.to.port,
      method: req.method,
      path: req.url,
      headers,
      setHost: false,
      createConnection: (_o, done) => void openUpstream(this.#upstreamOptions, route.key, (err, stream) => done(err, stream as Duplex)),
    });
    upstream.on('upgrade', (up: IncomingMessage, upSocket: Duplex, upHead: Buffer) => {
      upSocket.on('error', () => socket.destroy());
      if (socket.destroyed) return void upSocket.destroy();
      socket.write(responseHead(101, up.statusMessage, up.rawHeaders));
      if (upHead.length > 0) socket.write(upHead);
      if (head.length > 0) upSocket.write(head);
      upSocket.pipe(socket);
      socket.pipe(upSocket);
      upSocket.on('close', () => socket.destroy());
      socket.on('close', () => upSocket.destroy());
    });
    upstream.on('response', (up: IncomingMessage) => {
      const status = up.statusCode ?? 0;
      if (status < 200 || status > 599) {
        up.destroy();
        return void socket.end(answer(502, 'the VM host sent a response that cannot be passed on'));
      }
      socket.write(responseHead(status, up.statusMessage, [...endToEndHeaders(up.rawHeaders), ...responseLength(up.headers), 'Connection', 'close']));
      pipeline(up, socket, () => undefined);
    });
    upstream.on('error', () => {
      if (!socket.destroyed) socket.end(answer(503, 'the VM host of this runtime is not answering'));
    });
    socket.on('close', () => upstream.destroy());
    upstream.end();
  }

  /** Joins the client, unread bytes and all, to the host's ingress on the native relay thread; the cap's count goes when the relay ends. */
  #join(socket: Socket, to: HostTarget, release: () => void): void {
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
        header = proxyHeader(this.opts.keys.keyOf(to.node), to.node, visitor, entered);
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
    upstream.on('error', () => socket.destroy());
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
      this.opts.log.warn({ err: (err as Error).message }, 'ingress entry relay failed');
      release();
      socket.resetAndDestroy();
      upstream.destroy();
    }
  }
}

/**
 * Whether a trusted proxy says its client used https: exactly one X-Forwarded-Proto, of one
 * value. A list (proxies that append) or anything else is taken as plain HTTP, the safe side:
 * an `https` spec is then not served, where the other way an `http` one would be served as https.
 */
function forwardedHttps(req: IncomingMessage): boolean {
  const values = headerValues(req.rawHeaders, 'x-forwarded-proto');
  return values.length === 1 && values[0]!.trim().toLowerCase() === 'https';
}

const REASONS: Record<number, string> = { 101: 'Switching Protocols', 400: 'Bad Request', 404: 'Not Found', 502: 'Bad Gateway', 503: 'Service Unavailable' };
/** A reason phrase passed on as the host wrote it: visible ASCII, spaces and tabs only. */
const PLAIN_REASON = /^[\t\x20-\x7e]*$/;

/** A response head for a socket no ServerResponse writes (an upgrade's), from a parsed head's values. */
function responseHead(status: number, reason: string | undefined, headers: readonly string[]): string {
  const lines = [`HTTP/1.1 ${status} ${reason !== undefined && PLAIN_REASON.test(reason) ? reason : (REASONS[status] ?? '')}`];
  for (let i = 0; i < headers.length; i += 2) lines.push(`${headers[i]}: ${headers[i + 1]}`);
  return `${lines.join('\r\n')}\r\n\r\n`;
}

const codeOf = (status: number): string => (status === 404 ? 'not_found' : status === 400 ? 'invalid_argument' : 'unavailable');
const envelope = (status: number, message: string): string => JSON.stringify({ error: { code: codeOf(status), message } });

/** A whole answer of the entry's own on a raw socket, which then ends. */
function answer(status: number, message: string): string {
  const body = envelope(status, message);
  return `${responseHead(status, undefined, ['Content-Type', 'application/json', 'Content-Length', String(Buffer.byteLength(body)), 'Connection', 'close'])}${body}`;
}

function answerWith(res: ServerResponse, status: number, message: string, close: boolean): void {
  if (res.headersSent) return void res.destroy();
  res.writeHead(status, { 'content-type': 'application/json', ...(close ? { connection: 'close' } : {}) });
  res.end(envelope(status, message));
}
