/**
 * HTTP/1.1 through the gateway, one request at a time, for plain HTTP and for TLS it terminated:
 * every request on a keep-alive connection is checked on its own Host, gets its matching rules'
 * secrets injected, and is sent to the address the gateway chose. Redirects are passed back to
 * the guest, never followed.
 */
import { request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { SecureContext } from 'node:tls';
import type { EgressAuditDetail, InjectionRule } from '../core/types.js';
import { hostMatches, normalizeHostName } from '../core/host-pattern.js';
import { headerValue, paramValue } from '../core/injection.js';
import { pathMatches } from '../core/path-glob.js';
import type { DenyReason, EgressDecisions } from './egress-decisions.js';
import type { RuntimeNet } from './runtime-registry.js';
import type { SecretCache } from './secret-cache.js';

export interface HttpContext {
  net: RuntimeNet;
  port: number;
  /** The address the guest connected to. */
  shownIp: string;
  /** Set when the gateway terminated TLS: the SNI the guest sent. */
  tls: { sni: string } | null;
}

/** Not forwarded: they describe one hop, not the request (RFC 9110 §7.6.1). */
export const HOP_BY_HOP: ReadonlySet<string> = new Set(['connection', 'keep-alive', 'proxy-connection', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'proxy-authorization', 'proxy-authenticate']);

export interface HttpForwarderOptions {
  decisions: EgressDecisions;
  secrets: SecretCache;
  /** What upstream TLS is verified against: the system's CAs plus VESSEL_EGRESS_EXTRA_CA. */
  upstreamTls: SecureContext;
  /** Inject over plain HTTP too (off by default: the secret would cross the network in clear). */
  injectPlainHttp: boolean;
  audit(net: RuntimeNet, detail: EgressAuditDetail): void;
}

function forwardedHeaders(raw: string[], drop: Set<string>): string[] {
  const connectionTokens = new Set<string>();
  for (let i = 0; i < raw.length; i += 2) {
    if (raw[i]!.toLowerCase() === 'connection') for (const t of raw[i + 1]!.split(',')) connectionTokens.add(t.trim().toLowerCase());
  }
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) {
    const name = raw[i]!.toLowerCase();
    if (HOP_BY_HOP.has(name) || connectionTokens.has(name) || drop.has(name)) continue;
    out.push(raw[i]!, raw[i + 1]!);
  }
  return out;
}

export class HttpForwarder {
  constructor(private readonly opts: HttpForwarderOptions) {}

  async handle(ctx: HttpContext, req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { net } = ctx;
    const url = req.url ?? '/';
    const path = url.split('?', 1)[0]!;
    const hostHeader = req.headers.host ?? '';
    const host = normalizeHostName(hostHeader.replace(/:\d{1,5}$/, ''));
    const base = { host: host ?? hostHeader, port: ctx.port, method: req.method ?? '', path };
    const deny = (reason: DenyReason, status = 403) => {
      this.opts.audit(net, { action: 'deny', ...base, ip: null, reason, status, rule_ids: [] });
      res.writeHead(status, { 'content-type': 'text/plain', connection: 'close' });
      res.end(`vessel egress: ${reason.replace(/_/g, ' ')}\n`);
    };
    // Only origin-form targets: an absolute URI would let the guest name another host.
    if (!url.startsWith('/')) return deny('bad_request', 400);
    if (host === null) return deny('no_host');
    if (ctx.tls !== null && host !== ctx.tls.sni) return deny('sni_host_mismatch');
    const target = await this.opts.decisions.target(net, host, ctx.shownIp);
    if (!target.ok) return deny(target.reason);

    const rules = ctx.tls !== null || this.opts.injectPlainHttp ? net.subject.rules.filter((r) => hostMatches(r.hostPattern, host) && pathMatches(r.pathPattern, path)) : [];
    const injected = await this.#inject(net, rules, req.rawHeaders, url);
    const ruleIds = injected.applied.map((r) => r.id);
    const send = ctx.tls !== null ? httpsRequest : httpRequest;
    const upstream = send({
      host: target.ip,
      port: ctx.port,
      method: req.method,
      path: injected.url,
      headers: injected.headers,
      setHost: false,
      agent: ctx.tls !== null ? net.agents.https : net.agents.http,
      // One context made once: passing `ca` per request would make Node rebuild it and key the
      // connection pool on the whole bundle's text.
      ...(ctx.tls !== null ? { servername: host, secureContext: this.opts.upstreamTls } : {}),
    });
    const done = (status: number, reason: string) => this.opts.audit(net, { action: 'allow', ...base, ip: target.ip, reason, status, rule_ids: ruleIds });
    upstream.on('response', (up) => {
      res.writeHead(up.statusCode ?? 502, up.statusMessage, forwardedHeaders(up.rawHeaders, new Set()));
      up.pipe(res);
      done(up.statusCode ?? 502, 'host_allowed');
    });
    upstream.on('error', (err) => {
      if (!res.headersSent) {
        res.writeHead(502, { 'content-type': 'text/plain', connection: 'close' });
        res.end('vessel egress: upstream failed\n');
        done(502, `upstream_error: ${(err as NodeJS.ErrnoException).code ?? 'failed'}`);
      } else {
        res.destroy();
      }
    });
    req.pipe(upstream);
  }

  /** Headers with each rule's header set (replacing the guest's own), and the query with its parameter. */
  async #inject(net: RuntimeNet, rules: InjectionRule[], rawHeaders: string[], url: string) {
    const applied: InjectionRule[] = [];
    const set: Array<[string, string]> = [];
    let target = url;
    for (const rule of rules) {
      const secret = await this.opts.secrets.get(net.subject.tenantId, rule.secretId);
      if (secret === null) continue;
      set.push([rule.injection.headerName, headerValue(rule.injection, secret)]);
      const param = paramValue(rule.injection, secret);
      if (param !== null) {
        const u = new URL(target, 'http://x');
        u.searchParams.set(rule.injection.paramName!, param);
        target = u.pathname + u.search;
      }
      applied.push(rule);
    }
    const headers = forwardedHeaders(rawHeaders, new Set(set.map(([n]) => n.toLowerCase())));
    for (const [n, v] of set) headers.push(n, v);
    return { headers, url: target, applied };
  }
}
