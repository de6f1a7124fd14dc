/**
 * The network gateway (the core's NetworkGateway port): per-runtime TAPs and the nftables table,
 * the DNS responder, the transparent egress proxy, ICMP drop audits from the table's counters,
 * and the ingress listener. Listeners bind the gateway address, which exists only on our own devices.
 */
import { existsSync, readFileSync } from 'node:fs';
import { createSecureContext, rootCertificates } from 'node:tls';
import { GUEST_NETWORK, type EgressSubject, type GatewayHooks, type NetworkGateway } from '../core/ports.js';
import type { EgressAuditDetails, EgressAuditKind } from '../core/types.js';
import { identityAddress, slotOfTap } from './addressing.js';
import { DialPolicy } from './blocked-ranges.js';
import type { CertificateAuthority } from './certificate-authority.js';
import { ConnectionLimits } from './connection-limits.js';
import { flushConntrack } from './conntrack.js';
import { DnsResponder } from './dns-responder.js';
import { EgressDecisions } from './egress-decisions.js';
import { EgressProxy } from './egress-proxy.js';
import { HostAddresses } from './host-addresses.js';
import { HttpForwarder } from './http-forwarder.js';
import { Ingress } from './ingress.js';
import { applyRuleset, removeRuleset, takeIcmpCounts } from './nftables.js';
import { NameResolver } from './resolver.js';
import { RuntimeNet, RuntimeRegistry, StandInAddresses } from './runtime-registry.js';
import { SecretCache } from './secret-cache.js';
import { SlotAllocator } from './slots.js';
import { createTap, deleteTap, ensureGatewayDevice, listTaps } from './taps.js';

export interface GatewayOptions {
  /** Tells this service's TAPs and table from another instance's on the same host. */
  instance: string;
  ca: CertificateAuthority;
  proxyPort: number;
  dnsPort: number;
  allowCidrs: string[];
  dnsOverridesFile: string | undefined;
  extraCaFile: string | undefined;
  injectPlainHttp: boolean;
  icmpAuditSecs: number;
  /** `fleet`: a fleet's VM host, whose ingress believes signed PROXY headers from API nodes' entries (ingress.ts). */
  ingress: { host: string; port: number; domain: string; fleet?: { secret: string; node: string } | undefined };
  /** Egress connections one runtime may hold open at once (default DEFAULT_MAX_CONNECTIONS_PER_RUNTIME). */
  maxConnectionsPerRuntime?: number;
  /** Egress connections all of one tenant's runtimes may hold open at once (default DEFAULT_MAX_CONNECTIONS_PER_TENANT). */
  maxConnectionsPerTenant?: number;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
}

/**
 * Open egress connections per runtime: far above what a build or a crawler needs, far below the
 * descriptors (two per spliced connection) and relay buffers (128 KiB each) the host can spare.
 */
export const DEFAULT_MAX_CONNECTIONS_PER_RUNTIME = 256;
/** Open egress connections per tenant, across its runtimes: one tenant cannot starve the others. */
export const DEFAULT_MAX_CONNECTIONS_PER_TENANT = 1024;

const SYSTEM_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

function upstreamCas(extraCaFile: string | undefined): string[] {
  const system = existsSync(SYSTEM_CA_BUNDLE) ? [readFileSync(SYSTEM_CA_BUNDLE, 'utf8')] : [...rootCertificates];
  return extraCaFile === undefined ? system : [...system, readFileSync(extraCaFile, 'utf8')];
}

export class Gateway implements NetworkGateway {
  readonly #registry = new RuntimeRegistry();
  /** TAPs that exist for runtimes not (yet) enforced, e.g. stopped ones after a restart. */
  readonly #taps = new Map<string, string>();
  readonly #proxy: EgressProxy;
  readonly #dns: DnsResponder;
  readonly #ingress: Ingress;
  readonly #secrets: SecretCache;
  readonly #slots = new SlotAllocator();
  readonly #hostAddresses: HostAddresses;
  #icmpTimer: NodeJS.Timeout | null = null;
  #hooks: GatewayHooks | null = null;
  /** TAP and rule set changes run one at a time: slots are picked from what exists, and each load writes the whole table. */
  #queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly opts: GatewayOptions) {
    const dial = new DialPolicy(opts.allowCidrs);
    this.#hostAddresses = new HostAddresses(undefined, (addresses) => dial.setHostAddresses(addresses));
    dial.setHostAddresses(this.#hostAddresses.current);
    const decisions = new EgressDecisions(new NameResolver(opts.dnsOverridesFile), dial);
    this.#secrets = new SecretCache((tenantId, secretId) => this.#requireHooks().revealSecret(tenantId, secretId));
    const audit = <K extends EgressAuditKind>(net: RuntimeNet, kind: K, detail: EgressAuditDetails[K]) => this.#hooks?.audit(net.id, net.subject.tenantId, kind, detail);
    const activity = (net: RuntimeNet) => this.#hooks?.activity(net.id);
    const forwarder = new HttpForwarder({
      decisions,
      secrets: this.#secrets,
      upstreamTls: createSecureContext({ ca: upstreamCas(opts.extraCaFile) }),
      injectPlainHttp: opts.injectPlainHttp,
      audit: (net, detail) => audit(net, 'http_request', detail),
      log: opts.log,
    });
    const limits = new ConnectionLimits({
      perRuntime: opts.maxConnectionsPerRuntime ?? DEFAULT_MAX_CONNECTIONS_PER_RUNTIME,
      perTenant: opts.maxConnectionsPerTenant ?? DEFAULT_MAX_CONNECTIONS_PER_TENANT,
    });
    this.#proxy = new EgressProxy({ registry: this.#registry, decisions, ca: opts.ca, forwarder, audit, limits, activity, log: opts.log });
    this.#dns = new DnsResponder({ registry: this.#registry, decisions, standIns: new StandInAddresses(), activity, log: opts.log });
    this.#ingress = new Ingress({ domain: opts.ingress.domain, registry: this.#registry, ca: opts.ca, hooks: () => this.#hooks, log: opts.log, fleet: opts.ingress.fleet });
  }

  /** The core, once it exists: secrets, audits and activity go there. */
  connect(hooks: GatewayHooks): void {
    this.#hooks = hooks;
  }

  async start(): Promise<void> {
    this.#hostAddresses.start();
    await ensureGatewayDevice();
    await this.#proxy.listen(GUEST_NETWORK.gateway, this.opts.proxyPort);
    await this.#dns.listen(GUEST_NETWORK.gateway, this.opts.dnsPort);
    await this.#ingress.listen(this.opts.ingress.host, this.opts.ingress.port);
    if (this.opts.icmpAuditSecs > 0) {
      this.#icmpTimer = setInterval(() => void this.#auditIcmp(), this.opts.icmpAuditSecs * 1000);
      this.#icmpTimer.unref();
    }
  }

  attach(subject: EgressSubject): Promise<string> {
    return this.#exclusive(() => this.#attach(subject));
  }

  async #attach(subject: EgressSubject): Promise<string> {
    const existing = this.#registry.get(subject.runtimeId);
    if (existing !== undefined) {
      existing.subject = subject;
      return existing.tap;
    }
    let tap = this.#taps.get(subject.runtimeId);
    if (tap === undefined) {
      tap = await this.#freeTap();
      await createTap(tap, { instance: this.opts.instance, runtimeId: subject.runtimeId }, identityAddress(slotOfTap(tap)!));
      this.#taps.set(subject.runtimeId, tap);
    }
    this.#registry.add(new RuntimeNet(subject, tap, identityAddress(slotOfTap(tap)!)));
    await this.#writeRuleset();
    return tap;
  }

  update(subject: EgressSubject): void {
    const net = this.#registry.get(subject.runtimeId);
    if (net !== undefined) net.subject = subject;
  }

  detach(runtimeId: string): Promise<void> {
    return this.#exclusive(() => this.#detach(runtimeId));
  }

  /**
   * Leaves nothing of the runtime behind for whoever gets its slot next: its connections (guest
   * sockets, relays, upstream pools), its rules, its TAP, its conntrack entries; then the slot rests.
   */
  async #detach(runtimeId: string): Promise<void> {
    await this.#registry.remove(runtimeId);
    const tap = this.#taps.get(runtimeId);
    this.#taps.delete(runtimeId);
    await this.#writeRuleset();
    if (tap === undefined) return;
    await deleteTap(tap);
    await flushConntrack(identityAddress(slotOfTap(tap)!)).catch((err: Error) => this.opts.log.warn({ err: err.message, tap }, 'could not flush conntrack entries'));
    this.#slots.release(tap);
  }

  restore(subjects: EgressSubject[]): Promise<void> {
    return this.#exclusive(() => this.#restore(subjects));
  }

  async #restore(subjects: EgressSubject[]): Promise<void> {
    const wanted = new Map(subjects.map((s) => [s.runtimeId, s]));
    for (const { tap, owner } of await listTaps()) {
      if (owner?.instance !== this.opts.instance) continue;
      const subject = wanted.get(owner.runtimeId);
      if (subject === undefined || slotOfTap(tap) === null || this.#taps.has(owner.runtimeId)) {
        await deleteTap(tap);
        continue;
      }
      const runtimeId = owner.runtimeId;
      this.#taps.set(runtimeId, tap);
      this.#registry.add(new RuntimeNet(subject, tap, identityAddress(slotOfTap(tap)!)));
    }
    await this.#writeRuleset();
  }

  /** Stops listening. The TAPs and the table stay for the VMs that keep running; a table with no TAP left goes. */
  async close(): Promise<void> {
    if (this.#icmpTimer !== null) clearInterval(this.#icmpTimer);
    this.#hostAddresses.stop();
    await this.#exclusive(async () => {
      if (this.#taps.size === 0) await removeRuleset(this.#table).catch(() => undefined);
    });
    this.#dns.close();
    await this.#proxy.close();
    await this.#ingress.close();
    this.#secrets.clear();
    await Promise.all(this.#registry.all().map((net) => net.close()));
  }

  /** The lowest slot whose TAP exists nowhere on the host (other instances' included) and that is not resting. */
  async #freeTap(): Promise<string> {
    return this.#slots.lowestFree(new Set([...this.#taps.values(), ...(await listTaps()).map((t) => t.tap)]));
  }

  get #table(): string {
    return `vessel_${this.opts.instance}`;
  }

  #exclusive<T>(work: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(work);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  #writeRuleset(): Promise<void> {
    return applyRuleset({
      table: this.#table,
      proxyPort: this.opts.proxyPort,
      dnsPort: this.opts.dnsPort,
      attachments: [...this.#taps.values()].map((tap) => ({ tap, identity: identityAddress(slotOfTap(tap)!) })),
    });
  }

  async #auditIcmp(): Promise<void> {
    try {
      const counts = await takeIcmpCounts(this.#table);
      for (const net of this.#registry.all()) {
        const count = counts.get(net.tap);
        if (count !== undefined) this.#hooks?.audit(net.id, net.subject.tenantId, 'icmp_drop', { action: 'deny', host: null, ip: null, port: null, reason: 'icmp_dropped', count });
      }
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'could not read ICMP counters');
    }
  }

  #requireHooks(): GatewayHooks {
    if (this.#hooks === null) throw new Error('gateway not connected to the core');
    return this.#hooks;
  }
}
