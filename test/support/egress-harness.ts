/**
 * The egress proxy, forwarder and ingress in this process, without TAPs or nftables: a "guest" is
 * a loopback client bound to its runtime's identity address (127.0.0.x here), and the original
 * destination the kernel would report is supplied by the test. Upstreams are the loopback servers
 * of test/support/upstream.ts, which record what reaches them.
 */
import { request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent } from 'node:http';
import { readFileSync } from 'node:fs';
import { createSecureContext } from 'node:tls';
import type { EgressAuditDetail, EgressAuditDetails, EgressAuditKind, InjectionRule } from '../../src/core/types.js';
import { DialPolicy } from '../../src/net/blocked-ranges.js';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';
import { ConnectionLimits, type ConnectionCaps } from '../../src/net/connection-limits.js';
import { EgressDecisions } from '../../src/net/egress-decisions.js';
import { EgressProxy } from '../../src/net/egress-proxy.js';
import { HttpForwarder } from '../../src/net/http-forwarder.js';
import type { RequestDeadlineOptions } from '../../src/net/request-deadlines.js';
import { NameResolver, overridesFromFile } from '../../src/net/resolver.js';
import { RuntimeNet, RuntimeRegistry } from '../../src/net/runtime-registry.js';
import { SecretCache, type RevealSecret } from '../../src/net/secret-cache.js';
import { freePort } from './service.js';
import { Upstreams } from './upstream.js';

export interface Audited {
  runtimeId: string;
  kind: EgressAuditKind;
  /** Any kind's fields can be read; those its kind lacks are undefined. */
  detail: EgressAuditDetail & Partial<EgressAuditDetails['http_request']>;
}

export const quietLog = { warn: () => undefined, info: () => undefined, error: () => undefined };

export class EgressHarness {
  readonly up = new Upstreams();
  readonly registry = new RuntimeRegistry();
  readonly audits: Audited[] = [];
  /** Called with each audit as it is recorded, after it is kept in `audits` (a test's store). */
  auditSink: ((a: Audited) => void) | null = null;
  readonly secrets = new Map<string, string>();
  limits!: ConnectionLimits;
  decisions!: EgressDecisions;
  ca!: CertificateAuthority;
  proxy!: EgressProxy;
  proxyPort = 0;
  /** Where the next proxied connection was meant to go (what SO_ORIGINAL_DST would say). */
  destination = { address: '127.0.0.1', port: 0 };

  constructor(
    private readonly caps: ConnectionCaps = { perRuntime: 256, perTenant: 1024 },
    private readonly deadlines: RequestDeadlineOptions = {},
    /** Where secrets' values come from (a core's gateway hook); by default `secrets`, as `rule` fills it. */
    private readonly reveal: RevealSecret | null = null,
  ) {}

  async start(): Promise<void> {
    await this.up.start();
    this.up.setNames({ 'api.test': '127.0.0.1', 'raw.test': '127.0.0.1' });
    this.ca = await CertificateAuthority.loadOrCreate(this.up.dir);
    this.decisions = new EgressDecisions(new NameResolver(overridesFromFile(this.up.overridesFile)), new DialPolicy(['127.0.0.0/8']));
    this.limits = new ConnectionLimits(this.caps);
    const secrets = new SecretCache(
      this.reveal ??
        (async (_tenant, id) => {
          const value = this.secrets.get(id);
          return value === undefined ? null : { value, cacheTtlSecs: 0 };
        }),
    );
    const forwarder = new HttpForwarder({
      decisions: this.decisions,
      secrets,
      upstreamTls: createSecureContext({ ca: readFileSync(this.up.caFile, 'utf8') }),
      injectPlainHttp: true,
      audit: (net, detail) => this.#record({ runtimeId: net.id, kind: 'http_request', detail }),
      log: quietLog,
    });
    this.proxy = new EgressProxy({
      registry: this.registry,
      decisions: this.decisions,
      ca: this.ca,
      forwarder,
      audit: (net, kind, detail) => this.#record({ runtimeId: net.id, kind, detail } as Audited),
      limits: this.limits,
      activity: () => undefined,
      log: quietLog,
      originalDst: () => this.destination,
      ...this.deadlines,
    });
    this.proxyPort = await freePort();
    await this.proxy.listen('127.0.0.1', this.proxyPort);
  }

  #record(a: Audited): void {
    this.audits.push(a);
    this.auditSink?.(a);
  }

  /** A runtime whose guest connects from `identity` (a 127.0.0.x address). */
  runtime(id: string, identity: string, allowed: string[], rules: InjectionRule[] = [], tenantId = 'tenant-a'): RuntimeNet {
    const net = new RuntimeNet({ runtimeId: id, tenantId, policy: { enabled: true, allowed_hosts: allowed }, rules }, `vsl-${id}`, identity);
    this.registry.add(net);
    return net;
  }

  /** A rule injecting `secret` for api.test. */
  rule(id: string, secret: string, injection: InjectionRule['injection']): InjectionRule {
    this.secrets.set(`secret-${id}`, secret);
    return { id, tenantId: 'tenant-a', runtimeId: 'rt', hostPattern: 'api.test', pathPattern: '/**', secretId: `secret-${id}`, injection, createdAt: new Date().toISOString() };
  }

  /** A keep-alive client for one guest: one connection, reused for each request. */
  guestAgent(identity: string): Agent {
    return new Agent({ keepAlive: true, maxSockets: 1, localAddress: identity } as ConstructorParameters<typeof Agent>[0]);
  }

  /** One request through the proxy as the guest at `agent`'s address; `headers` is a flat raw list. */
  send(agent: Agent, method: string, path: string, headers: string[], body?: string): Promise<{ status: number; headers: IncomingMessage['headers']; rawHeaders: string[]; body: string }> {
    return new Promise((resolve, reject) => {
      const req = httpRequest({ host: '127.0.0.1', port: this.proxyPort, method, path, headers, setHost: false, agent }, (res) => {
        let text = '';
        res.on('data', (d) => (text += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, rawHeaders: res.rawHeaders, body: text }));
        res.on('error', reject);
      });
      req.setTimeout(5000, () => req.destroy(new Error('no answer within 5 s')));
      req.on('error', reject);
      req.end(body);
    });
  }

  async close(): Promise<void> {
    await this.proxy.close();
    await Promise.all(this.registry.all().map((net) => this.registry.remove(net.id)));
    this.up.close();
  }
}
