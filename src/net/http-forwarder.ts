/**
 * HTTP/1.1 through the gateway, one request at a time, for plain HTTP and for TLS it terminated:
 * every request on a keep-alive connection is checked on its own Host, gets its matching rules'
 * secrets injected, and is sent to the address the gateway chose, with exactly one Host (the
 * decided one) and a body framed explicitly. Redirects are passed back to the guest, never
 * followed, with injected values redacted from every response header.
 */
import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { pipeline } from 'node:stream';
import type { SecureContext } from 'node:tls';
import type { EgressAuditDetails } from '../core/types.js';
import { hostMatches, normalizeHostName } from '../core/host-pattern.js';
import { pathMatches } from '../core/path-glob.js';
import type { DenyReason, EgressDecisions } from './egress-decisions.js';
import { endToEndHeaders, headerValues, requestFraming, responseLength, writeRelayedHead } from './forwarded-headers.js';
import type { RuntimeNet } from './runtime-registry.js';
import type { SecretCache } from './secret-cache.js';
import { injectionFor } from './secret-injection.js';
import { Redactor } from './secret-redaction.js';

export interface HttpContext {
  net: RuntimeNet;
  port: number;
  /** The address the guest connected to. */
  shownIp: string;
  /** Set when the gateway terminated TLS: the SNI the guest sent. */
  tls: { sni: string } | null;
}

export interface HttpForwarderOptions {
  decisions: EgressDecisions;
  secrets: SecretCache;
  /** What upstream TLS is verified against: the system's CAs plus VESSEL_EGRESS_EXTRA_CA. */
  upstreamTls: SecureContext;
  /** Inject over plain HTTP too (off by default: the secret would cross the network in clear). */
  injectPlainHttp: boolean;
  audit(net: RuntimeNet, detail: EgressAuditDetails['http_request']): void;
  log: { warn(o: object, m: string): void };
}

/** Methods whose response echoes the request, injected headers included (RFC 9110 §9.3.8). */
const ECHOING_METHODS: ReadonlySet<string> = new Set(['TRACE', 'TRACK']);

/** The Host the upstream gets: the decided name, with the port only where it is not the scheme's. */
export function decidedHost(host: string, port: number, tls: boolean): string {
  return port === (tls ? 443 : 80) ? host : `${host}:${port}`;
}

export class HttpForwarder {
  constructor(private readonly opts: HttpForwarderOptions) {}

  /** Serves one request. Never rejects: whatever fails answers 502, or closes the guest's connection. */
  async handle(ctx: HttpContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      await this.#forward(ctx, req, res);
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message, runtimeId: ctx.net.id }, 'egress request failed');
      if (res.headersSent) return void res.destroy();
      res.writeHead(502, { 'content-type': 'text/plain', connection: 'close' });
      res.end('vessel egress: request failed\n');
    }
  }

  async #forward(ctx: HttpContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { net } = ctx;
    const url = req.url ?? '/';
    const path = url.split('?', 1)[0]!;
    const method = req.method ?? '';
    const hosts = headerValues(req.rawHeaders, 'host');
    const host = normalizeHostName((hosts[0] ?? '').replace(/:\d{1,5}$/, ''));
    const base = { host: host ?? hosts[0] ?? '', port: ctx.port, method, path };
    const deny = (reason: DenyReason, status: number) => {
      this.opts.audit(net, { action: 'deny', ...base, ip: null, reason, status, rule_ids: [] });
      res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' });
      res.end(`vessel egress: ${reason.replace(/_/g, ' ')}\n`);
    };
    // Only origin-form targets: an absolute URI would let the guest name another host.
    if (!url.startsWith('/')) return deny('bad_request', 400);
    // The decision is made on one Host: a second one could be what the upstream reads.
    if (hosts.length !== 1) return deny('bad_request', 400);
    const framing = requestFraming(req.headers);
    if (framing === null) return deny('bad_request', 400);
    if (ECHOING_METHODS.has(method)) return deny('method_not_allowed', 405);
    if (host === null) return deny('no_host', 403);
    if (ctx.tls !== null && host !== ctx.tls.sni) return deny('sni_host_mismatch', 403);
    const target = await this.opts.decisions.target(net, host, ctx.shownIp);
    if (!target.ok) return deny(target.reason, 403);
    if (net.closed) return void req.socket.destroy();

    const rules = ctx.tls !== null || this.opts.injectPlainHttp ? net.subject.rules.filter((r) => hostMatches(r.hostPattern, host) && pathMatches(r.pathPattern, path)) : [];
    const injection = await injectionFor(rules, net.subject.tenantId, this.opts.secrets, url);
    const redactor = new Redactor(injection.values);
    const replaced = new Set(injection.headers.map(([n]) => n.toLowerCase()));
    const headers = ['Host', decidedHost(host, ctx.port, ctx.tls !== null), ...endToEndHeaders(req.rawHeaders, replaced), ...framing, ...injection.headers.flat()];
    const ruleIds = injection.applied.map((r) => r.id);
    const send = ctx.tls !== null ? httpsRequest : httpRequest;
    const upstream = send({
      host: target.ip,
      port: ctx.port,
      method,
      path: injection.target,
      headers,
      setHost: false,
      agent: ctx.tls !== null ? net.agents.https : net.agents.http,
      // One context made once: passing `ca` per request would make Node rebuild it and key the
      // connection pool on the whole bundle's text.
      ...(ctx.tls !== null ? { servername: host, secureContext: this.opts.upstreamTls } : {}),
    });
    const done = (status: number, reason: string) => this.opts.audit(net, { action: 'allow', ...base, ip: target.ip, reason, status, rule_ids: ruleIds });
    const failed = (code: string) => {
      res.writeHead(502, { 'content-type': 'text/plain', connection: 'close' });
      res.end('vessel egress: upstream failed\n');
      done(502, `upstream_error: ${code}`);
    };
    upstream.on('response', (up) => {
      const headers = [...redactor.headers(endToEndHeaders(up.rawHeaders)), ...responseLength(up.headers)];
      if (!writeRelayedHead(res, up.statusCode, redactor.text(up.statusMessage ?? ''), headers)) {
        // Not a response we can pass on: its connection is not reused either.
        up.destroy();
        return failed('bad_response');
      }
      // A response cut short closes the guest's connection rather than leave it mid-message.
      pipeline(up, res, () => undefined);
      done(up.statusCode!, 'host_allowed');
    });
    upstream.on('error', (err) => {
      if (!res.headersSent) failed((err as NodeJS.ErrnoException).code ?? 'failed');
      else res.destroy();
    });
    // A request body cut short must not leave a half-sent request on a pooled connection.
    req.on('close', () => req.complete || upstream.destroy());
    req.pipe(upstream);
  }
}
