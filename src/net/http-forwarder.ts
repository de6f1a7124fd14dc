/**
 * HTTP/1.1 through the gateway, one request at a time, for plain HTTP and for TLS it terminated:
 * every request on a keep-alive connection is checked on its own Host, gets its matching rules'
 * secrets injected, and is sent to the address the gateway chose, with exactly one Host (the
 * decided one) and a body framed explicitly. Redirects are passed back to the guest, never
 * followed, with injected values redacted from every response header and, as it streams, from
 * the body of every response of a host a rule names (body-redaction.ts).
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
import { acquireMatcher, RedactingStream } from './body-redaction.js';
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

/**
 * Request headers of the guest's that a request to a host a rule names never carries upstream:
 * the body must come back as plain bytes, whole, for redaction to see every secret in it. The
 * gateway asks for `Accept-Encoding: identity` instead; a Range would let a guest read an echo in
 * slices, each too short to hold a whole spelling of the secret.
 */
const GUARDED_REQUEST_HEADERS: readonly string[] = ['accept-encoding', 'range', 'if-range'];

/** A response that carries body bytes (RFC 9112 §6.3): not to HEAD, not 204 or 304. */
const hasBody = (method: string, status: number): boolean => method !== 'HEAD' && status !== 204 && status !== 304;

/**
 * Whether a response's body bytes are the content itself: no content coding but identity, and no
 * transfer coding Node's parser leaves in place (it decodes `chunked` alone; `gzip, chunked`
 * would reach us gzipped).
 */
function plainBody(headers: IncomingMessage['headers']): boolean {
  const codings = (headers['content-encoding'] ?? '').split(',').map((t) => t.trim().toLowerCase());
  const te = headers['transfer-encoding'];
  return codings.every((t) => t === '' || t === 'identity') && (te === undefined || te.trim().toLowerCase() === 'chunked');
}

/** Redacts nothing: for a host no rule with a secret names. */
const NO_REDACTION = new Redactor([]);

/** The Host the upstream gets: the decided name, with the port only where it is not the scheme's. */
export function decidedHost(host: string, port: number, tls: boolean): string {
  return port === (tls ? 443 : 80) ? host : `${host}:${port}`;
}

/** The redactors of one connection's last values: a keep-alive connection's requests usually share them. */
interface Redaction {
  key: string;
  head: Redactor;
  body: ReturnType<typeof acquireMatcher>;
}

export class HttpForwarder {
  /**
   * Per guest connection, so that its requests do not each rebuild the automaton (for a 64 KiB
   * secret, some 10⁶ nodes); the automaton itself is shared by connections with the same values
   * (body-redaction.ts) and let go when the connection closes or its values change (a secret read
   * again with cache_ttl_secs 0 may have been rotated).
   */
  readonly #redactions = new WeakMap<HttpContext, Redaction>();

  constructor(private readonly opts: HttpForwarderOptions) {}

  /** The connection's redactors for `values`; throws when they are too large to redact a body of. */
  #redaction(ctx: HttpContext, socket: IncomingMessage['socket'], values: readonly string[]): Redaction {
    const key = values.join('\u0000');
    const had = this.#redactions.get(ctx);
    if (had?.key === key) return had;
    const body = acquireMatcher(values);
    had?.body.release();
    const r = { key, head: new Redactor(values), body };
    this.#redactions.set(ctx, r);
    if (had === undefined) socket.once('close', () => this.#redactions.get(ctx)?.body.release());
    return r;
  }

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

    // Every rule for the host is read: a rule's path (and whether plain HTTP may carry secrets)
    // decides where its secret is injected, not where it may come back: an upstream can keep one
    // request's header and answer it to another, over TLS or not.
    const hostRules = net.subject.rules.filter((r) => hostMatches(r.hostPattern, host));
    const injects = ctx.tls !== null || this.opts.injectPlainHttp;
    const injection = await injectionFor(hostRules, (r) => injects && pathMatches(r.pathPattern, path), net.subject.tenantId, this.opts.secrets, url);
    // A host a rule names with a secret: its answers are redacted, heads and bodies. The automaton
    // is made before anything is sent: values too large to redact refuse the request here (502).
    const guarded = injection.values.length > 0;
    // Gone while its secrets were read: nothing to send, and its 'close' (which lets go of the
    // automaton) has already been emitted.
    if (req.socket.closed) return;
    const redaction = guarded ? this.#redaction(ctx, req.socket, injection.values) : null;
    const redactor = redaction?.head ?? NO_REDACTION;
    const replaced = new Set([...injection.headers.map(([n]) => n.toLowerCase()), ...(guarded ? GUARDED_REQUEST_HEADERS : [])]);
    const headers = [
      'Host', decidedHost(host, ctx.port, ctx.tls !== null),
      ...endToEndHeaders(req.rawHeaders, replaced), ...framing, ...injection.headers.flat(),
      ...(guarded ? ['Accept-Encoding', 'identity'] : []),
    ];
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
      const body = guarded && hasBody(method, up.statusCode ?? 0);
      if (body && !plainBody(up.headers)) {
        // Asked for identity and answered compressed anyway: bytes we cannot read for the secret
        // are not passed on. The connection is not reused either.
        up.destroy();
        res.writeHead(502, { 'content-type': 'text/plain', connection: 'close' });
        res.end('vessel egress: the upstream answered with an encoded body (Content-Encoding or Transfer-Encoding other than identity/chunked) to a request of a host with an injection rule; it cannot be checked for secrets, so it is refused\n');
        return done(502, 'upstream_error: encoded_response');
      }
      const headers = [...redactor.headers(endToEndHeaders(up.rawHeaders)), ...responseLength(up.headers)];
      if (!writeRelayedHead(res, up.statusCode, redactor.text(up.statusMessage ?? ''), headers)) {
        // Not a response we can pass on: its connection is not reused either.
        up.destroy();
        return failed('bad_response');
      }
      // A response cut short closes the guest's connection rather than leave it mid-message.
      if (body && redaction !== null) pipeline(up, new RedactingStream(redaction.body.matcher), res, () => undefined);
      else pipeline(up, res, () => undefined);
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
