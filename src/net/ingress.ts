/**
 * Ingress: the one listener through which the outside reaches guest ports, routed by Host
 * `<runtime_port>-<runtime id>.<domain>` to ports that the runtime's ingress_specs list. Only the
 * id routes: display names are unique per tenant alone, so another tenant could otherwise take a
 * name's traffic. One port serves both protocols: a TLS ClientHello is terminated with a leaf from
 * the service CA (for `https` specs), anything else is plain HTTP (for `http` specs). Requests go
 * to the guest over its TAP as plain HTTP with their bodies framed explicitly, and nothing else of
 * the guest is reachable.
 *
 * On a single host, E2B's envd port goes to the API instead (`envd` below, docs/e2b.md).
 *
 * Everything here comes from unauthenticated clients: every handler catches its failures and
 * closes the connection, and a leaf is signed only for a route that exists (or for envd's names).
 */
import { Agent as HttpAgent, createServer as createHttpServer, request, type IncomingMessage, type RequestOptions, type ServerResponse } from 'node:http';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { pipeline } from 'node:stream';
import { TLSSocket } from 'node:tls';
import type { GatewayHooks } from '../core/ports.js';
import type { CertificateAuthority } from './certificate-authority.js';
import { endToEndHeaders, headerValues, requestFraming, responseLength, writeRelayedHead } from './forwarded-headers.js';
import { hostOnlyCookies, hostOnlyResponseHead } from './ingress-cookies.js';
import { closeListener, listenOn } from './listeners.js';
import { RequestDeadlines, type RequestDeadlineOptions } from './request-deadlines.js';
import type { RuntimeNet, RuntimeRegistry } from './runtime-registry.js';
import { sniffSocket } from './socket-ops.js';
import { ConnectionsPerSource } from './source-caps.js';
import { ProxiedClients } from './proxy-header.js';

/**
 * Open connections one client address may hold on the ingress port. Each costs a descriptor and,
 * while it says nothing, up to SILENT_MS of waiting: this keeps one client from using up the
 * service's descriptors (and so the API's, which shares the process).
 */
export const MAX_INGRESS_CONNECTIONS_PER_SOURCE = 64;
/** Open ingress connections of all clients together: what a botnet can hold of our descriptors. */
export const MAX_INGRESS_CONNECTIONS = 4096;
/** How long a client may stay silent before it is served as plain HTTP. */
const SILENT_MS = 10_000;
/** Set by the gateway on every request to a guest; what the client sent under these names is dropped. */
const SET_FOR_GUEST: ReadonlySet<string> = new Set(['x-forwarded-proto', 'x-forwarded-for']);

/** Headers of a request to envd that the ingress sets itself (the sandbox named, the client). */
const SET_FOR_ENVD: ReadonlySet<string> = new Set([...SET_FOR_GUEST, 'e2b-sandbox-id', 'e2b-sandbox-port']);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * The deadlines of request-deadlines.ts (defaults there; tests set shorter ones). The head's runs
 * from accept, sniffing and any TLS handshake included.
 */
export interface IngressOptions extends RequestDeadlineOptions {
  domain: string;
  registry: RuntimeRegistry;
  ca: CertificateAuthority;
  hooks: () => GatewayHooks | null;
  log: { warn(o: object, m: string): void };
  /**
   * A VM host of a fleet: connections relayed by API nodes' ingress entries start with a PROXY
   * header signed with the cluster secret for this host (src/net/proxy-header.ts), and are
   * counted and forwarded as the visitor's it names. Absent (a single host): no header is read.
   */
  fleet?: { secret: string; node: string } | undefined;
  /**
   * A single host's API, which serves envd (E2B's in-sandbox agent, docs/e2b.md) for every
   * runtime: its address, the path of its envd routes, and envd's port. Requests for that port
   * (by Host, or by E2B's `E2b-Sandbox-Id` and `E2b-Sandbox-Port` headers whatever the Host) go
   * there, the runtime named in E2b-Sandbox-Id, with no ingress spec; the API authenticates them.
   * Absent (a fleet's VM host): that port routes as any other.
   */
  envd?: { host: string; port: number; pathPrefix: string; runtimePort: number } | undefined;
}

/** `8000-<uuid>.example.test` with domain `example.test` → { port: 8000, runtimeId: '<uuid>' }. */
export function parseIngressHost(hostHeader: string, domain: string): { port: number; runtimeId: string } | null {
  const host = hostHeader.replace(/:\d{1,5}$/, '').replace(/\.$/, '').toLowerCase();
  const suffix = `.${domain.toLowerCase()}`;
  if (!host.endsWith(suffix)) return null;
  const m = /^(\d{1,5})-(.+)$/.exec(host.slice(0, -suffix.length));
  if (m === null || !UUID.test(m[2]!)) return null;
  const port = Number(m[1]);
  return port >= 1 && port <= 65535 ? { port, runtimeId: m[2]! } : null;
}

type Route = { net: RuntimeNet; port: number; protocol: 'http' | 'https' };

export class Ingress {
  readonly #server: Server;
  readonly #http = createHttpServer({ requireHostHeader: true });
  readonly #overTls = new WeakSet<Socket>();
  readonly #perSource = new ConnectionsPerSource(MAX_INGRESS_CONNECTIONS_PER_SOURCE, MAX_INGRESS_CONNECTIONS);
  /** The accepted socket under each TLS socket made on it. */
  readonly #rawOf = new WeakMap<Socket, Socket>();
  readonly #deadlines: RequestDeadlines;
  readonly #proxied: ProxiedClients | null;
  /** The visitor an accepted socket carries, when an API node's entry relayed it for one. */
  readonly #visitors = new WeakMap<Socket, string>();
  /** Connections to the API's envd routes, kept for the next request. */
  readonly #envdAgent = new HttpAgent({ keepAlive: true });

  constructor(private readonly opts: IngressOptions) {
    this.#deadlines = new RequestDeadlines(opts);
    this.#proxied = opts.fleet === undefined ? null : new ProxiedClients(opts.fleet.secret, opts.fleet.node);
    this.#server = createServer({ pauseOnConnect: true }, (s) => this.#admit(s));
    this.#http.on('request', (req: IncomingMessage, res: ServerResponse) => {
      this.#deadlines.request(this.#rawOf.get(req.socket) ?? req.socket, req, res);
      void this.#guard(req.socket, () => this.#forward(req, res));
    });
    this.#http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => {
      this.#deadlines.release(this.#rawOf.get(socket) ?? socket);
      void this.#guard(socket, () => this.#upgrade(req, socket, head));
    });
    this.#http.on('clientError', (_err, socket: Socket) => socket.destroy());
  }

  listen = async (host: string, port: number): Promise<void> => {
    await listenOn(this.#server, host, port, this.opts.log);
    this.#deadlines.start();
  };

  close = (): Promise<void> => {
    this.#deadlines.stop();
    this.#envdAgent.destroy();
    return closeListener(this.#server, this.#http);
  };

  /**
   * Counts the connection against its client's cap and the total, then serves it. A connection
   * from an API node that relays visitors is counted, once its header is read, as the visitor's
   * (`recount`); until then, against the total alone (ProxiedClients.fromFleet says why).
   */
  #admit(socket: Socket): void {
    socket.on('error', () => undefined);
    const fromFleet = this.#proxied?.fromFleet(socket) === true;
    let release = this.#perSource.hold(socket, fromFleet ? MAX_INGRESS_CONNECTIONS : MAX_INGRESS_CONNECTIONS_PER_SOURCE);
    if (release === null) return void socket.destroy();
    socket.once('close', () => release?.());
    const recount = (address: string): boolean => {
      release?.();
      release = this.#perSource.holdFor(address);
      return release !== null;
    };
    this.#deadlines.admit(socket);
    void this.#guard(socket, () => this.#accept(socket, fromFleet, recount));
  }

  /** Runs a handler; whatever it throws closes the connection instead of leaving it open. */
  async #guard(socket: Socket, work: () => Promise<void>): Promise<void> {
    try {
      await work();
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'ingress connection failed');
      socket.destroy();
    }
  }

  async #accept(socket: Socket, fromFleet: boolean, recount: (address: string) => boolean): Promise<void> {
    let first = await sniffSocket(socket, SILENT_MS);
    // A PROXY header is none of HTTP's or TLS's first bytes: it can only be in what sniffs as other.
    const visitor = this.#proxied !== null && first.kind === 'other' ? await this.#proxied.take(socket) : null;
    // A header that is not ours, or not for this host, is refused: it would pass its sender off as anyone.
    if (typeof visitor === 'string') return void socket.destroy();
    if (visitor !== null || fromFleet) {
      // A visitor over its share is refused here, whichever API nodes its connections came through.
      if (!recount(visitor?.address ?? socket.remoteAddress ?? '')) return void socket.destroy();
    }
    if (visitor !== null) {
      this.#visitors.set(socket, visitor.address);
      first = await sniffSocket(socket, SILENT_MS);
    }
    if (socket.destroyed || first.kind === 'bad_tls') return void socket.destroy();
    if (first.kind === 'tls') {
      // A leaf is signed only for a name that routes to an https port, or to envd.
      const sni = first.sni;
      if (sni === null || !(this.#servesEnvdAt(sni) || (await this.#routesHttps(sni)))) return void socket.destroy();
      // The name the route was found by, in the form a certificate holds (lowercase, no final dot).
      const secureContext = await this.opts.ca.contextFor(sni.toLowerCase().replace(/\.$/, ''));
      if (socket.destroyed) return;
      const tls = new TLSSocket(socket, { isServer: true, secureContext, ALPNProtocols: ['http/1.1'] });
      tls.on('error', () => socket.destroy());
      this.#rawOf.set(tls, socket);
      this.#overTls.add(tls);
      this.#http.emit('connection', tls);
    } else {
      this.#http.emit('connection', socket);
    }
    socket.resume();
  }

  /**
   * Whether a TLS name is envd's: `49983-<id>.<domain>` of a runtime attached here (so leaves are
   * signed for no more names than there are runtimes), or the ingress domain itself, which
   * E2B_SANDBOX_URL names when envd's calls are routed by their headers.
   */
  #servesEnvdAt(name: string): boolean {
    if (this.opts.envd === undefined) return false;
    if (name.toLowerCase().replace(/\.$/, '') === this.opts.domain.toLowerCase()) return true;
    const target = parseIngressHost(name, this.opts.domain);
    return target !== null && target.port === this.opts.envd.runtimePort && this.opts.registry.get(target.runtimeId) !== undefined;
  }

  /**
   * The runtime an envd request names: by its Host, or, when the Host names no runtime port, by
   * E2B's headers (exactly one of each). Null: not for envd.
   */
  #envdRuntimeOf(req: IncomingMessage): string | null {
    if (this.opts.envd === undefined) return null;
    const target = parseIngressHost(req.headers.host ?? '', this.opts.domain);
    if (target !== null) return target.port === this.opts.envd.runtimePort ? target.runtimeId : null;
    const ids = headerValues(req.rawHeaders, 'e2b-sandbox-id');
    const ports = headerValues(req.rawHeaders, 'e2b-sandbox-port');
    if (ids.length !== 1 || ports.length !== 1 || ports[0]!.trim() !== String(this.opts.envd.runtimePort)) return null;
    const id = ids[0]!.trim().toLowerCase();
    return UUID.test(id) ? id : null;
  }

  /**
   * An envd request, relayed to the API's envd routes as it came (its access token included),
   * with the runtime named by the ingress. The answer comes back as the API made it.
   */
  #forwardEnvd(req: IncomingMessage, res: ServerResponse, runtimeId: string, fail: (status: number, message: string) => void): void {
    const envd = this.opts.envd!;
    const framing = requestFraming(req.headers);
    if (framing === null) return fail(400, 'the request body cannot be forwarded with its transfer coding');
    if (req.url === undefined || !req.url.startsWith('/')) return fail(400, 'the request target must be a path');
    const headers = [
      'Host', `${envd.host.includes(':') ? `[${envd.host}]` : envd.host}:${envd.port}`,
      ...endToEndHeaders(req.rawHeaders, SET_FOR_ENVD),
      ...framing,
      'E2b-Sandbox-Id', runtimeId,
      'E2b-Sandbox-Port', String(envd.runtimePort),
      'X-Forwarded-Proto', this.#overTls.has(req.socket) ? 'https' : 'http',
      'X-Forwarded-For', this.#clientOf(req.socket),
    ];
    this.#relay(req, res, { host: envd.host, port: envd.port, method: req.method, path: `${envd.pathPrefix}${req.url}`, headers, setHost: false, agent: this.#envdAgent }, endToEndHeaders, fail, {
      unrelayable: 'the API sent a response for envd that cannot be passed on',
      invalid: 'the API sent an invalid response for envd',
      silent: 'envd is not answering: the API is not running',
    });
  }

  async #routesHttps(name: string): Promise<boolean> {
    const route = await this.#route(name);
    return route !== null && !('status' in route) && route.protocol === 'https';
  }

  /** Where a Host routes: the runtime and the spec's protocol, or why nowhere. */
  async #route(hostHeader: string): Promise<Route | { status: number; message: string } | null> {
    const target = parseIngressHost(hostHeader, this.opts.domain);
    if (target === null) return null;
    const hooks = this.opts.hooks();
    const found = hooks === null ? null : await hooks.ingressTarget(target.runtimeId, target.port);
    if (found === null) return null;
    const net = this.opts.registry.get(found.runtimeId);
    if (net === undefined) return { status: 503, message: `runtime ${target.runtimeId} has no network` };
    hooks!.activity(found.runtimeId);
    return { net, port: target.port, protocol: found.protocol };
  }

  /** The route of a request that arrived over the protocol its port is exposed with, or why none. */
  async #target(req: IncomingMessage): Promise<Route | { status: number; message: string }> {
    const host = req.headers.host ?? '';
    const protocol = this.#overTls.has(req.socket) ? 'https' : 'http';
    if (headerValues(req.rawHeaders, 'host').length !== 1) return { status: 400, message: 'exactly one Host header is required' };
    if (requestFraming(req.headers) === null) return { status: 400, message: 'the request body cannot be forwarded with its transfer coding' };
    const route = await this.#route(host);
    if (route === null || ('protocol' in route && route.protocol !== protocol)) return { status: 404, message: `no runtime exposes ${protocol} at '${host}'` };
    return route;
  }

  /** The request's headers for the guest: one Host, explicit framing, X-Forwarded-*. */
  #headersFor(req: IncomingMessage): string[] {
    return [
      'Host', req.headers.host ?? '',
      ...endToEndHeaders(req.rawHeaders, SET_FOR_GUEST),
      ...(requestFraming(req.headers) ?? []),
      'X-Forwarded-Proto', this.#overTls.has(req.socket) ? 'https' : 'http',
      'X-Forwarded-For', this.#clientOf(req.socket),
    ];
  }

  /** The client a request came from: the visitor an API node's entry vouched for, or the peer. */
  #clientOf(socket: Socket): string {
    const accepted = this.#rawOf.get(socket) ?? socket;
    return this.#visitors.get(accepted) ?? accepted.remoteAddress ?? '';
  }

  async #forward(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const fail = (status: number, message: string) => {
      const code = status === 404 ? 'not_found' : status === 400 ? 'invalid_argument' : 'unavailable';
      res.writeHead(status, { 'content-type': 'application/json', connection: 'close' });
      res.end(JSON.stringify({ error: { code, message } }));
    };
    const envd = this.#envdRuntimeOf(req);
    if (envd !== null) return this.#forwardEnvd(req, res, envd, fail);
    const to = await this.#target(req);
    if ('status' in to) return fail(to.status, to.message);
    // Every cookie host-only: a Domain would reach every other runtime under the ingress domain.
    const responseHeaders = (raw: string[]): string[] => hostOnlyCookies(endToEndHeaders(raw));
    this.#relay(req, res, { host: to.net.identity, port: to.port, method: req.method, path: req.url, headers: this.#headersFor(req), setHost: false, agent: to.net.ingressAgent }, responseHeaders, fail, {
      unrelayable: `the runtime sent a response on port ${to.port} that cannot be passed on`,
      invalid: `the runtime sent an invalid response on port ${to.port}`,
      silent: `the runtime is not answering on port ${to.port}`,
    });
  }

  /**
   * Sends a request on (`options`) and its answer back, with the response headers `responseHeaders`
   * keeps; what goes wrong before the answer's head is answered with `fail` and `messages`.
   */
  #relay(
    req: IncomingMessage,
    res: ServerResponse,
    options: RequestOptions,
    responseHeaders: (raw: string[]) => string[],
    fail: (status: number, message: string) => void,
    messages: { unrelayable: string; invalid: string; silent: string },
  ): void {
    const upstream = request(options, (up) => {
      if (!writeRelayedHead(res, up.statusCode, up.statusMessage, [...responseHeaders(up.rawHeaders), ...responseLength(up.headers)])) {
        // Not a response we can pass on (see writeRelayedHead): its connection is not reused either.
        up.destroy();
        return fail(502, messages.unrelayable);
      }
      // A response cut short closes the client's connection rather than leave it mid-message.
      pipeline(up, res, () => undefined);
    });
    upstream.on('error', (err: NodeJS.ErrnoException) => {
      if (res.headersSent) return void res.destroy();
      // A parser error (HPE_*) is a response that was no HTTP: 502; otherwise nothing answered: 503.
      const invalid = err.code?.startsWith('HPE_') === true;
      fail(invalid ? 502 : 503, invalid ? messages.invalid : messages.silent);
    });
    // A request body cut short must not leave a half-sent request on a pooled connection.
    req.on('close', () => req.complete || upstream.destroy());
    req.pipe(upstream);
  }

  /**
   * WebSocket and other upgrades: the request head goes to the guest, and only once the guest
   * answers 101 do bytes flow both ways. Until then nothing more of the client's reaches it, so
   * requests pipelined behind a refused upgrade are never delivered undecided (with the
   * forwarding headers they set themselves). A refusal is relayed and the connection ends.
   */
  async #upgrade(req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    socket.on('error', () => undefined);
    const to = await this.#target(req);
    if ('status' in to) return void socket.end(`HTTP/1.1 ${to.status} ${to.status === 404 ? 'Not Found' : to.status === 400 ? 'Bad Request' : 'Service Unavailable'}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    const upstream = createConnection({ host: to.net.identity, port: to.port }, () => {
      const headers = [...this.#headersFor(req), 'Connection', 'Upgrade', 'Upgrade', req.headers.upgrade ?? ''];
      const lines: string[] = [];
      for (let i = 0; i < headers.length; i += 2) lines.push(`${headers[i]}: ${headers[i + 1]}`);
      upstream.write(`${req.method} ${req.url} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`);
      readResponseHead(upstream, (answer) => {
        // Its cookies made host-only, as for any response; a head clients may read apart is refused.
        const end = answer.indexOf('\r\n\r\n') + 4;
        const relayed = hostOnlyResponseHead(answer.subarray(0, end));
        if (relayed === null) return void socket.destroy();
        socket.write(Buffer.concat([relayed, answer.subarray(end)]));
        upstream.pipe(socket);
        if (!/^HTTP\/1\.1 101[ \r]/.test(answer.toString('latin1', 0, 13))) return;
        if (head.length > 0) upstream.write(head);
        socket.pipe(upstream);
      });
    });
    to.net.track(upstream);
    upstream.on('error', () => socket.destroy());
    upstream.on('close', () => socket.destroy());
    socket.on('close', () => upstream.destroy());
  }
}

/** The longest response head a guest may send to an upgrade request. */
const MAX_UPGRADE_RESPONSE_HEAD_BYTES = 16 * 1024;

/**
 * Reads `upstream` up to the end of a response head (each byte looked at once) and hands over
 * that head and whatever followed it, leaving the stream paused; a head longer than the cap, or
 * none before the end, destroys the stream.
 */
function readResponseHead(upstream: Socket, onHead: (bytes: Buffer) => void): void {
  const chunks: Buffer[] = [];
  let size = 0;
  let tail = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    chunks.push(chunk);
    size += chunk.length;
    // The terminator may straddle two chunks: search the last 3 bytes of before with the new ones.
    const window = Buffer.concat([tail, chunk]);
    const end = window.indexOf('\r\n\r\n');
    if (end === -1) {
      tail = window.subarray(Math.max(0, window.length - 3));
      if (size > MAX_UPGRADE_RESPONSE_HEAD_BYTES) upstream.destroy();
      return;
    }
    upstream.off('data', onData);
    upstream.pause();
    onHead(Buffer.concat(chunks));
  };
  upstream.on('data', onData);
}
