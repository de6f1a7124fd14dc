/**
 * Everything of the gateway that reads what guests and visitors send: the DNS responder, the
 * transparent egress proxy (TLS, HTTP, secret injection and redaction) and the ingress listener,
 * over the registry of attached runtimes. It runs in the gateway's own unprivileged process
 * (gateway-process.ts), so a bug in any of these parsers costs the guests' network for a moment,
 * never the API or the host. The devices it serves (TAPs, the nftables table) are the service's.
 */
import { createSecureContext } from 'node:tls';
import { GUEST_NETWORK, type EgressSubject, type GatewayHooks } from '../core/ports.js';
import type { EgressAuditDetails, EgressAuditKind } from '../core/types.js';
import { DialPolicy } from './blocked-ranges.js';
import type { CertificateAuthority } from './certificate-authority.js';
import { ConnectionLimits, DEFAULT_MAX_CONNECTIONS_PER_RUNTIME, DEFAULT_MAX_CONNECTIONS_PER_TENANT } from './connection-limits.js';
import { DnsResponder } from './dns-responder.js';
import { EgressDecisions } from './egress-decisions.js';
import { EgressProxy } from './egress-proxy.js';
import { HostAddresses } from './host-addresses.js';
import { HttpForwarder } from './http-forwarder.js';
import { Ingress } from './ingress.js';
import { NameResolver, type OverrideLookup } from './resolver.js';
import { RuntimeNet, RuntimeRegistry, StandInAddresses } from './runtime-registry.js';
import { SecretCache } from './secret-cache.js';

/** The listeners' settings: plain data, so that the service can send them to the gateway process. */
export interface ListenerSettings {
  proxyPort: number;
  dnsPort: number;
  allowCidrs: string[];
  /** PEM certificates the proxy trusts upstream: the system's, and VESSEL_EGRESS_EXTRA_CA_FILE's. */
  upstreamCaPems: string[];
  injectPlainHttp: boolean;
  /** `fleet`: a fleet's VM host, whose ingress believes signed PROXY headers from API nodes' entries (ingress.ts). */
  ingress: {
    host: string;
    port: number;
    domain: string;
    fleet?: { secret: string; node: string } | undefined;
    /** A single host's API, which serves envd's port of every runtime (ingress.ts, docs/e2b.md). */
    envd?: { host: string; port: number; pathPrefix: string; runtimePort: number } | undefined;
  };
  maxConnectionsPerRuntime?: number | undefined;
  maxConnectionsPerTenant?: number | undefined;
}

/** One attached runtime, as the listeners know it. */
export interface Attachment {
  subject: EgressSubject;
  tap: string;
  identity: string;
}

/** What the listeners ask of the service: the core's gateway hooks, and the DNS overrides file. */
export interface ListenerHooks extends GatewayHooks {
  dnsOverride: OverrideLookup;
}

export interface ListenerLog {
  info(o: object, m: string): void;
  warn(o: object, m: string): void;
  error(o: object, m: string): void;
}

export class GatewayListeners {
  readonly #registry = new RuntimeRegistry();
  readonly #proxy: EgressProxy;
  readonly #dns: DnsResponder;
  readonly #ingress: Ingress;
  readonly #secrets: SecretCache;
  readonly #hostAddresses: HostAddresses;

  constructor(
    private readonly settings: ListenerSettings,
    ca: CertificateAuthority,
    hooks: ListenerHooks,
    log: ListenerLog,
  ) {
    const dial = new DialPolicy(settings.allowCidrs);
    this.#hostAddresses = new HostAddresses(undefined, (addresses) => dial.setHostAddresses(addresses));
    dial.setHostAddresses(this.#hostAddresses.current);
    const decisions = new EgressDecisions(new NameResolver(hooks.dnsOverride), dial);
    this.#secrets = new SecretCache((tenantId, secretId) => hooks.revealSecret(tenantId, secretId));
    const audit = <K extends EgressAuditKind>(net: RuntimeNet, kind: K, detail: EgressAuditDetails[K]) => hooks.audit(net.id, net.subject.tenantId, kind, detail);
    const activity = (net: RuntimeNet) => hooks.activity(net.id);
    const forwarder = new HttpForwarder({
      decisions,
      secrets: this.#secrets,
      upstreamTls: createSecureContext({ ca: settings.upstreamCaPems }),
      injectPlainHttp: settings.injectPlainHttp,
      audit: (net, detail) => audit(net, 'http_request', detail),
      log,
    });
    const limits = new ConnectionLimits({
      perRuntime: settings.maxConnectionsPerRuntime ?? DEFAULT_MAX_CONNECTIONS_PER_RUNTIME,
      perTenant: settings.maxConnectionsPerTenant ?? DEFAULT_MAX_CONNECTIONS_PER_TENANT,
    });
    this.#proxy = new EgressProxy({ registry: this.#registry, decisions, ca, forwarder, audit, limits, activity, log });
    this.#dns = new DnsResponder({ registry: this.#registry, decisions, standIns: new StandInAddresses(), activity, log });
    this.#ingress = new Ingress({ domain: settings.ingress.domain, registry: this.#registry, ca, hooks: () => hooks, log, fleet: settings.ingress.fleet, envd: settings.ingress.envd });
  }

  /** Listens on the gateway address (which must exist: the service made its device) and the ingress address. */
  async listen(): Promise<void> {
    this.#hostAddresses.start();
    await this.#proxy.listen(GUEST_NETWORK.gateway, this.settings.proxyPort);
    await this.#dns.listen(GUEST_NETWORK.gateway, this.settings.dnsPort);
    await this.#ingress.listen(this.settings.ingress.host, this.settings.ingress.port);
  }

  /** Starts serving a runtime, or takes its new policy and rules when it is served already. */
  add(attachment: Attachment): void {
    const existing = this.#registry.get(attachment.subject.runtimeId);
    if (existing !== undefined && existing.tap === attachment.tap) {
      existing.subject = attachment.subject;
      return;
    }
    if (existing !== undefined) void this.#registry.remove(existing.id);
    this.#registry.add(new RuntimeNet(attachment.subject, attachment.tap, attachment.identity));
  }

  /** A new policy or rule set: applies to the next connection and the next request. */
  update(subject: EgressSubject): void {
    const net = this.#registry.get(subject.runtimeId);
    if (net !== undefined) net.subject = subject;
  }

  /** Ends everything of the runtime that is held here; resolves once its relays are closed. */
  remove(runtimeId: string): Promise<void> {
    return this.#registry.remove(runtimeId);
  }

  /** Serves exactly these runtimes from now on. */
  async replaceAll(attachments: Attachment[]): Promise<void> {
    const wanted = new Set(attachments.map((a) => a.subject.runtimeId));
    await Promise.all(this.#registry.all().filter((net) => !wanted.has(net.id)).map((net) => this.#registry.remove(net.id)));
    for (const a of attachments) this.add(a);
  }

  async close(): Promise<void> {
    this.#hostAddresses.stop();
    this.#dns.close();
    await this.#proxy.close();
    await this.#ingress.close();
    this.#secrets.clear();
    await Promise.all(this.#registry.all().map((net) => net.close()));
  }
}
