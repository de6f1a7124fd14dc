/**
 * The transparent proxy every guest TCP connection is redirected to. It learns the real
 * destination (SO_ORIGINAL_DST), peeks at the first bytes without consuming them, decides, and
 * then either splices the untouched socket to the address the gateway chose, terminates TLS to
 * inject secrets, or serves plain HTTP request by request. Refusals are prompt: a TCP reset, or
 * a 403 for HTTP.
 */
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import type { EgressAuditDetails } from '../core/types.js';
import { hostMatches, normalizeHostName } from '../core/host-pattern.js';
import type { CertificateAuthority } from './certificate-authority.js';
import type { ConnectionLimits } from './connection-limits.js';
import { closeListener, listenOn } from './listeners.js';
import type { DenyReason, EgressDecisions } from './egress-decisions.js';
import { HttpForwarder, type HttpContext } from './http-forwarder.js';
import { RequestDeadlines, type RequestDeadlineOptions } from './request-deadlines.js';
import type { RuntimeNet, RuntimeRegistry } from './runtime-registry.js';
import { originalDst, relaySockets, sniffSocket } from './socket-ops.js';

/**
 * A client that says nothing this long is taken to speak a server-first protocol (raw TCP,
 * allowed only by a DNS pin). A TLS client in a loaded TCG guest can take several hundred
 * milliseconds between connect and its ClientHello (300 ms was seen to be too short under load),
 * and a server-first protocol's banner waiting a second once per connection costs little.
 */
const SILENT_MS = 1000;
const CONNECT_TIMEOUT_MS = 10_000;
const KEEPALIVE_MS = 30_000;
/** How long an HTTP connection of a guest's may stay idle between requests: its clients pool them. */
const HTTP_KEEP_ALIVE_MS = 60_000;

export interface ProxyAudit {
  <K extends 'tcp_connection' | 'http_request'>(net: RuntimeNet, kind: K, detail: EgressAuditDetails[K]): void;
}

/**
 * The deadlines of request-deadlines.ts apply to plain and intercepted HTTP (defaults there;
 * tests set shorter ones), the head's from when the connection is served as HTTP, so an
 * intercepted TLS handshake is within it.
 */
export interface EgressProxyOptions extends RequestDeadlineOptions {
  registry: RuntimeRegistry;
  decisions: EgressDecisions;
  ca: CertificateAuthority;
  forwarder: HttpForwarder;
  audit: ProxyAudit;
  limits: ConnectionLimits;
  activity(net: RuntimeNet): void;
  log: { warn(o: object, m: string): void };
  /** Where the guest meant to connect: the kernel's SO_ORIGINAL_DST (tests without nftables supply their own). */
  originalDst?: (socket: Socket) => { address: string; port: number };
}

type Destination = { address: string; port: number };

export class EgressProxy {
  readonly #server: Server;
  readonly #http = createHttpServer({ requireHostHeader: true, keepAliveTimeout: HTTP_KEEP_ALIVE_MS });
  readonly #contexts = new WeakMap<Socket, HttpContext>();
  /** The accepted socket under each TLS socket made on it. */
  readonly #rawOf = new WeakMap<Socket, Socket>();
  readonly #deadlines: RequestDeadlines;
  /** Gives back a guest connection's place under the caps; a splice hands it to its relay. */
  readonly #releases = new WeakMap<Socket, () => void>();

  constructor(private readonly opts: EgressProxyOptions) {
    this.#deadlines = new RequestDeadlines(opts, HTTP_KEEP_ALIVE_MS);
    // Paused until the decision: peeking leaves the bytes in the kernel for whoever takes over.
    this.#server = createServer({ pauseOnConnect: true, noDelay: true }, (s) => void this.#accept(s));
    this.#http.on('request', (req: IncomingMessage, res: ServerResponse) => {
      const ctx = this.#contexts.get(req.socket);
      if (ctx === undefined) return void res.destroy();
      this.#deadlines.request(this.#rawOf.get(req.socket) ?? req.socket, req, res);
      void opts.forwarder.handle(ctx, req, res);
    });
    // Malformed requests (smuggling attempts with both Content-Length and Transfer-Encoding
    // included) are answered 400 by Node's strict parser; they are audited as denied.
    this.#http.on('clientError', (err: Error & { code?: string }, socket: Socket) => {
      const ctx = this.#contexts.get(socket);
      if (ctx !== undefined && err.code !== 'ECONNRESET' && err.code !== 'HPE_HEADER_OVERFLOW_EOF') {
        opts.audit(ctx.net, 'http_request', { action: 'deny', host: ctx.tls?.sni ?? null, ip: null, port: ctx.port, reason: 'bad_request', status: 400 });
      }
      if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n');
      else socket.destroy();
    });
  }

  listen = async (host: string, port: number): Promise<void> => {
    await listenOn(this.#server, host, port, this.opts.log);
    this.#deadlines.start();
  };

  close = (): Promise<void> => {
    this.#deadlines.stop();
    return closeListener(this.#server, this.#http);
  };

  async #accept(socket: Socket): Promise<void> {
    socket.on('error', () => undefined);
    const net = this.opts.registry.byIdentity(socket.remoteAddress);
    let dst: Destination;
    try {
      if (net === undefined) throw new Error('unknown source');
      dst = (this.opts.originalDst ?? originalDst)(socket);
    } catch {
      socket.resetAndDestroy();
      return;
    }
    const lease = this.opts.limits.open(net.id, net.subject.tenantId);
    if (lease === null) return this.#deny(socket, net, { host: null, ip: dst.address, port: dst.port }, 'connection_limit');
    const release = () => lease.release();
    this.#releases.set(socket, release);
    socket.once('close', release);
    net.track(socket);
    this.opts.activity(net);
    try {
      if (!net.subject.policy.enabled) return this.#passThrough(socket, net, dst);
      const first = await sniffSocket(socket, SILENT_MS);
      if (socket.destroyed || net.closed) return void socket.destroy();
      // A handshake we cannot read whole is refused: its name is not decided on in part.
      if (first.kind === 'bad_tls') return this.#deny(socket, net, { host: null, ip: dst.address, port: dst.port }, 'bad_request');
      if (first.kind === 'tls' && first.sni !== null) return await this.#tls(socket, net, dst, first.sni);
      if (first.kind === 'http') return this.#serveHttp(socket, { net, port: dst.port, shownIp: dst.address, tls: null });
      return this.#raw(socket, net, dst);
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message, runtimeId: net.id }, 'egress connection failed');
      socket.resetAndDestroy();
    }
  }

  /** `enabled: false`: no inspection, no audit, but still never a private address. */
  #passThrough(socket: Socket, net: RuntimeNet, dst: Destination): void {
    const ip = net.pinned(dst.address)?.realIp ?? dst.address;
    if (!this.opts.decisions.mayDial(ip)) return void socket.resetAndDestroy();
    this.#splice(socket, net, ip, dst.port);
  }

  async #tls(socket: Socket, net: RuntimeNet, dst: Destination, sni: string): Promise<void> {
    const host = normalizeHostName(sni);
    if (host === null) return this.#deny(socket, net, { host: sni, ip: null, port: dst.port }, 'no_host');
    const target = await this.opts.decisions.target(net, host, dst.address);
    if (!target.ok) return this.#deny(socket, net, { host, ip: null, port: dst.port }, target.reason);
    const intercept = net.subject.rules.some((r) => hostMatches(r.hostPattern, host));
    this.opts.audit(net, 'tcp_connection', { action: 'allow', host, ip: target.ip, port: dst.port, reason: intercept ? 'intercepted_for_injection' : 'host_allowed' });
    if (!intercept) return this.#splice(socket, net, target.ip, dst.port);
    const secureContext = await this.opts.ca.contextFor(host);
    if (socket.destroyed || net.closed) return void socket.destroy();
    const tlsSocket = new TLSSocket(socket, {
      isServer: true,
      secureContext,
      // HTTP/2 would need its own injection path; http/1.1 is what every client falls back to.
      ALPNProtocols: ['http/1.1'],
    });
    tlsSocket.on('error', () => socket.destroy());
    this.#serveHttp(tlsSocket, { net, port: dst.port, shownIp: dst.address, tls: { sni: host } }, socket);
    socket.resume();
  }

  #raw(socket: Socket, net: RuntimeNet, dst: Destination): void {
    const target = this.opts.decisions.pinnedTarget(net, dst.address);
    if (!target.ok) return this.#deny(socket, net, { host: target.host ?? null, ip: dst.address, port: dst.port }, target.reason);
    this.opts.audit(net, 'tcp_connection', { action: 'allow', host: target.host ?? null, ip: target.ip, port: dst.port, reason: 'address_pinned_by_dns' });
    this.#splice(socket, net, target.ip, dst.port);
  }

  /** Serves `socket` (on `raw`, the accepted socket, when it is TLS) request by request. */
  #serveHttp(socket: Socket, ctx: HttpContext, raw = socket): void {
    this.#contexts.set(socket, ctx);
    this.#rawOf.set(socket, raw);
    this.#deadlines.admit(raw);
    this.#http.emit('connection', socket);
    socket.resume();
  }

  #deny(socket: Socket, net: RuntimeNet, where: { host: string | null; ip: string | null; port: number }, reason: DenyReason): void {
    this.opts.audit(net, 'tcp_connection', { action: 'deny', ...where, reason });
    socket.resetAndDestroy();
  }

  /**
   * Joins the guest's socket, unread bytes and all, to a new connection to ip:port on the native
   * relay thread, so a spliced connection costs the event loop nothing after this. The relay
   * carries the runtime's tag (a detach closes it) and keeps the connection's place under the caps
   * until it ends.
   */
  #splice(socket: Socket, net: RuntimeNet, ip: string, port: number): void {
    const upstream = connect({ host: ip, port, noDelay: true, timeout: CONNECT_TIMEOUT_MS });
    // Not a byte may be read into Node's buffers before the native relay takes over.
    upstream.pause();
    upstream.once('timeout', () => upstream.destroy(new Error('connect timeout')));
    upstream.once('connect', () => {
      if (socket.destroyed || net.closed) return void upstream.destroy();
      // A peer that vanishes must not pin the relay forever.
      socket.setKeepAlive(true, KEEPALIVE_MS);
      upstream.setKeepAlive(true, KEEPALIVE_MS);
      const release = this.#releases.get(socket) ?? (() => undefined);
      socket.off('close', release);
      try {
        relaySockets(socket, upstream, net.relayTag, release);
      } catch (err) {
        // dup() fails with EMFILE when descriptors run out: this connection ends, not the service.
        this.opts.log.warn({ err: (err as Error).message, runtimeId: net.id }, 'relay failed');
        release();
        socket.resetAndDestroy();
        upstream.destroy();
      }
    });
    upstream.on('error', () => socket.resetAndDestroy());
    socket.on('error', () => upstream.destroy());
  }

}
