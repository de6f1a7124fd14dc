/**
 * Ingress: the one listener through which the outside reaches guest ports, routed by Host
 * `<runtime_port>-<runtime name or id>.<domain>` to ports that the runtime's ingress_specs list.
 * One port serves both protocols: a TLS ClientHello is terminated with a leaf from the service
 * CA (for `https` specs), anything else is plain HTTP (for `http` specs). Requests go to the
 * guest over its TAP as plain HTTP, and nothing else of the guest is reachable.
 */
import { createServer as createHttpServer, request, type IncomingMessage, type ServerResponse } from 'node:http';
import { createConnection, createServer, type Server, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import type { GatewayHooks } from '../core/ports.js';
import type { CertificateAuthority } from './certificate-authority.js';
import { HOP_BY_HOP } from './http-forwarder.js';
import { closeListener, listenOn } from './listeners.js';
import type { RuntimeRegistry } from './runtime-registry.js';
import { sniffSocket } from './socket-ops.js';


export interface IngressOptions {
  domain: string;
  registry: RuntimeRegistry;
  ca: CertificateAuthority;
  hooks: () => GatewayHooks | null;
}

/** `8000-web.example.test` with domain `example.test` → { port: 8000, runtime: 'web' }. */
export function parseIngressHost(hostHeader: string, domain: string): { port: number; runtime: string } | null {
  const host = hostHeader.replace(/:\d{1,5}$/, '').replace(/\.$/, '').toLowerCase();
  const suffix = `.${domain.toLowerCase()}`;
  if (!host.endsWith(suffix)) return null;
  const m = /^(\d{1,5})-(.+)$/.exec(host.slice(0, -suffix.length));
  if (m === null) return null;
  const port = Number(m[1]);
  return port >= 1 && port <= 65535 ? { port, runtime: m[2]! } : null;
}

export class Ingress {
  readonly #server: Server;
  readonly #http = createHttpServer({ requireHostHeader: true });
  readonly #overTls = new WeakSet<Socket>();

  constructor(private readonly opts: IngressOptions) {
    this.#server = createServer({ pauseOnConnect: true }, (s) => void this.#accept(s));
    this.#http.on('request', (req: IncomingMessage, res: ServerResponse) => void this.#route(req, res));
    this.#http.on('upgrade', (req: IncomingMessage, socket: Socket, head: Buffer) => void this.#upgrade(req, socket, head));
    this.#http.on('clientError', (_err, socket: Socket) => socket.destroy());
  }

  listen = (host: string, port: number): Promise<void> => listenOn(this.#server, host, port);
  close = (): Promise<void> => closeListener(this.#server, this.#http);

  async #accept(socket: Socket): Promise<void> {
    socket.on('error', () => undefined);
    const first = await sniffSocket(socket, 10_000);
    if (socket.destroyed) return;
    if (first.kind === 'tls') {
      const host = first.sni === null ? null : parseIngressHost(first.sni, this.opts.domain);
      if (host === null) return void socket.destroy();
      const tls = new TLSSocket(socket, { isServer: true, secureContext: await this.opts.ca.contextFor(first.sni!.toLowerCase()), ALPNProtocols: ['http/1.1'] });
      tls.on('error', () => socket.destroy());
      this.#overTls.add(tls);
      this.#http.emit('connection', tls);
    } else {
      this.#http.emit('connection', socket);
    }
    socket.resume();
  }

  /** Where a request goes: the guest's identity address and port, or why nowhere. */
  async #target(req: IncomingMessage): Promise<{ ip: string; port: number } | { status: number; message: string }> {
    const target = parseIngressHost(req.headers.host ?? '', this.opts.domain);
    if (target === null) return { status: 404, message: `no runtime is named by host '${req.headers.host ?? ''}'` };
    const hooks = this.opts.hooks();
    const found = hooks === null ? null : await hooks.ingressTarget(target.runtime, target.port);
    const protocol = this.#overTls.has(req.socket) ? 'https' : 'http';
    if (found === null || found.protocol !== protocol) return { status: 404, message: `runtime '${target.runtime}' exposes no ${protocol} port ${target.port}` };
    const net = this.opts.registry.get(found.runtimeId);
    if (net === undefined) return { status: 503, message: `runtime '${target.runtime}' has no network` };
    hooks!.activity(found.runtimeId);
    return { ip: net.identity, port: target.port };
  }

  #forwardedHeaders(req: IncomingMessage, keep: string[] = []): Record<string, string | string[]> {
    const headers: Record<string, string | string[]> = {};
    for (const [k, v] of Object.entries(req.headers)) if (v !== undefined && (keep.includes(k) || !HOP_BY_HOP.has(k))) headers[k] = v;
    headers['x-forwarded-proto'] = this.#overTls.has(req.socket) ? 'https' : 'http';
    headers['x-forwarded-for'] = req.socket.remoteAddress ?? '';
    return headers;
  }

  async #route(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const fail = (status: number, message: string) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: status === 404 ? 'not_found' : 'unavailable', message } }));
    };
    const to = await this.#target(req);
    if ('status' in to) return fail(to.status, to.message);
    const upstream = request({ host: to.ip, port: to.port, method: req.method, path: req.url, headers: this.#forwardedHeaders(req), setHost: false }, (up) => {
      const out: Record<string, string | string[]> = {};
      for (const [k, v] of Object.entries(up.headers)) if (v !== undefined && !HOP_BY_HOP.has(k)) out[k] = v;
      res.writeHead(up.statusCode ?? 502, up.statusMessage, out);
      up.pipe(res);
    });
    upstream.on('error', () => (res.headersSent ? res.destroy() : fail(503, `the runtime is not answering on port ${to.port}`)));
    req.pipe(upstream);
  }

  /** WebSocket and other upgrades: the request head goes to the guest, then bytes flow both ways. */
  async #upgrade(req: IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    socket.on('error', () => undefined);
    const to = await this.#target(req);
    if ('status' in to) return void socket.end(`HTTP/1.1 ${to.status} ${to.status === 404 ? 'Not Found' : 'Service Unavailable'}\r\nConnection: close\r\nContent-Length: 0\r\n\r\n`);
    const upstream = createConnection({ host: to.ip, port: to.port }, () => {
      const headers = this.#forwardedHeaders(req, ['connection', 'upgrade']);
      const lines = Object.entries(headers).flatMap(([k, v]) => (Array.isArray(v) ? v : [v]).map((x) => `${k}: ${x}`));
      upstream.write(`${req.method} ${req.url} HTTP/1.1\r\n${lines.join('\r\n')}\r\n\r\n`);
      if (head.length > 0) upstream.write(head);
      upstream.pipe(socket);
      socket.pipe(upstream);
    });
    upstream.on('error', () => socket.destroy());
    socket.on('close', () => upstream.destroy());
  }
}
