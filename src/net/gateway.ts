/**
 * The network gateway (the core's NetworkGateway port), in two processes (docs/security.md,
 * "Processes"). Here, in the service: per-runtime TAPs and the nftables table, slots, ICMP drop
 * audits from the table's counters, and the answers to what the listeners ask. In the gateway's own
 * unprivileged process (gateway-process.ts): the DNS responder, the transparent egress proxy and
 * the ingress listener, which parse everything guests and visitors send. When that process dies it
 * is started again and given every attached runtime; the VMs and the API never notice more than
 * the connections it held.
 */
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { rootCertificates } from 'node:tls';
import type { EgressSubject, GatewayHooks, NetworkGateway } from '../core/ports.js';
import { ChildPart } from '../platform/child-part.js';
import { LinkClosedError, type PartLink } from '../platform/part-link.js';
import type { PartUser } from '../platform/part-process.js';
import { ensureSystemUser } from '../platform/system-users.js';
import { identityAddress, slotOfTap } from './addressing.js';
import type { CertificateAuthority } from './certificate-authority.js';
import { flushConntrack } from './conntrack.js';
import type { Attachment, ListenerSettings } from './gateway-listeners.js';
import { checkedAuditBatch, checkedListenerCall } from './gateway-requests.js';
import type { GatewayPartSettings } from './gateway-process.js';
import { applyRuleset, removeRuleset, takeIcmpCounts } from './nftables.js';
import { OverridesFile } from './resolver.js';
import { SlotAllocator } from './slots.js';
import { createTap, deleteTap, ensureGatewayDevice, listTaps } from './taps.js';

/** Slots tried for one TAP when other instances on the host take them first. */
const TAP_ATTEMPTS = 8;

export { DEFAULT_MAX_CONNECTIONS_PER_RUNTIME, DEFAULT_MAX_CONNECTIONS_PER_TENANT } from './connection-limits.js';

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
  ingress: ListenerSettings['ingress'];
  /** Egress connections one runtime may hold open at once (default DEFAULT_MAX_CONNECTIONS_PER_RUNTIME). */
  maxConnectionsPerRuntime?: number;
  /** Egress connections all of one tenant's runtimes may hold open at once (default DEFAULT_MAX_CONNECTIONS_PER_TENANT). */
  maxConnectionsPerTenant?: number;
  logLevel?: string;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
}

/** The user the listeners run as. */
export const GATEWAY_USER = 'vessel-gateway';
/** The listeners' heap: TLS contexts, pins, request heads and redaction windows, never bodies. */
const LISTENER_HEAP_MIB = 1024;

const SYSTEM_CA_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

function upstreamCas(extraCaFile: string | undefined): string[] {
  const system = existsSync(SYSTEM_CA_BUNDLE) ? [readFileSync(SYSTEM_CA_BUNDLE, 'utf8')] : [...rootCertificates];
  return extraCaFile === undefined ? system : [...system, readFileSync(extraCaFile, 'utf8')];
}

export class Gateway implements NetworkGateway {
  /** The runtimes the listeners serve, as they were last told. */
  readonly #attached = new Map<string, Attachment>();
  /** TAPs that exist for runtimes not (yet) enforced, e.g. stopped ones after a restart. */
  readonly #taps = new Map<string, string>();
  readonly #slots = new SlotAllocator();
  readonly #listeners: ChildPart;
  readonly #dnsOverride: ((name: string) => string[] | undefined) | undefined;
  #user: PartUser | null = null;
  #icmpTimer: NodeJS.Timeout | null = null;
  #hooks: GatewayHooks | null = null;
  /** TAP and rule set changes run one at a time: slots are picked from what exists, and each load writes the whole table. */
  #queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly opts: GatewayOptions) {
    this.#dnsOverride = opts.dnsOverridesFile === undefined ? undefined : new OverridesFile(opts.dnsOverridesFile).lookup;
    const listeners: ListenerSettings = {
      proxyPort: opts.proxyPort,
      dnsPort: opts.dnsPort,
      allowCidrs: opts.allowCidrs,
      upstreamCaPems: upstreamCas(opts.extraCaFile),
      injectPlainHttp: opts.injectPlainHttp,
      ingress: opts.ingress,
      maxConnectionsPerRuntime: opts.maxConnectionsPerRuntime,
      maxConnectionsPerTenant: opts.maxConnectionsPerTenant,
    };
    this.#listeners = new ChildPart({
      name: 'gateway',
      entry: fileURLToPath(new URL('./gateway-process.js', import.meta.url)),
      maxHeapMib: LISTENER_HEAP_MIB,
      settings: (): GatewayPartSettings => ({ listeners, ca: opts.ca.pems(), dnsOverrides: this.#dnsOverride !== undefined, user: this.#user!, logLevel: opts.logLevel ?? 'info' }),
      handlers: (link) => this.#answer(link),
      // A new process knows nothing: it gets every runtime the last one served.
      onStart: (link) => link.call('replaceAll', [...this.#attached.values()]),
      log: opts.log,
    });
  }

  /** The TAP the runtime was given, if it has one: the only one its VM may be put on. */
  tapOf(runtimeId: string): string | undefined {
    return this.#taps.get(runtimeId);
  }

  /** The listeners' process, for tests and benches that measure or kill it; null while it is started again. */
  get listenerPid(): number | null {
    return this.#listeners.pid;
  }

  /** The core, once it exists: secrets, audits and activity go there. */
  connect(hooks: GatewayHooks): void {
    this.#hooks = hooks;
  }

  async start(): Promise<void> {
    await ensureGatewayDevice();
    this.#user = ensureSystemUser(GATEWAY_USER);
    await this.#listeners.start();
    if (this.opts.icmpAuditSecs > 0) {
      this.#icmpTimer = setInterval(() => void this.#auditIcmp(), this.opts.icmpAuditSecs * 1000);
      this.#icmpTimer.unref();
    }
  }

  attach(subject: EgressSubject): Promise<string> {
    return this.#exclusive(() => this.#attach(subject));
  }

  async #attach(subject: EgressSubject): Promise<string> {
    const existing = this.#attached.get(subject.runtimeId);
    if (existing !== undefined) {
      existing.subject = subject;
      await this.#tell('add', existing);
      return existing.tap;
    }
    let tap = this.#taps.get(subject.runtimeId);
    if (tap === undefined) {
      tap = await this.#createFreeTap(subject.runtimeId);
      this.#taps.set(subject.runtimeId, tap);
    }
    const attachment: Attachment = { subject, tap, identity: identityAddress(slotOfTap(tap)!) };
    this.#attached.set(subject.runtimeId, attachment);
    // The listeners serve it before its VM can send a packet: the rules that let it through come after.
    await this.#tell('add', attachment);
    await this.#writeRuleset();
    return tap;
  }

  async update(subject: EgressSubject): Promise<void> {
    const attachment = this.#attached.get(subject.runtimeId);
    if (attachment === undefined) return;
    attachment.subject = subject;
    // Answered once the listeners hold it: the API's answer to a rule or policy change comes after.
    await this.#tell('update', subject);
  }

  detach(runtimeId: string): Promise<void> {
    return this.#exclusive(() => this.#detach(runtimeId));
  }

  /**
   * Leaves nothing of the runtime behind for whoever gets its slot next: its connections (guest
   * sockets, relays, upstream pools, in the listeners), its rules, its TAP, its conntrack entries;
   * then the slot rests.
   */
  async #detach(runtimeId: string): Promise<void> {
    this.#attached.delete(runtimeId);
    await this.#tell('remove', runtimeId);
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

  /**
   * Also for a new API process while this one runs on (the last one crashed): the TAPs it holds
   * for runtimes still wanted stay as they are; those of runtimes gone are removed.
   */
  async #restore(subjects: EgressSubject[]): Promise<void> {
    const wanted = new Map(subjects.map((s) => [s.runtimeId, s]));
    for (const runtimeId of [...this.#taps.keys()]) if (!wanted.has(runtimeId)) await this.#detach(runtimeId);
    for (const { tap, owner } of await listTaps()) {
      if (owner?.instance !== this.opts.instance) continue;
      const subject = wanted.get(owner.runtimeId);
      const held = this.#taps.get(owner.runtimeId);
      if (subject === undefined || slotOfTap(tap) === null || (held !== undefined && held !== tap)) {
        await deleteTap(tap);
        continue;
      }
      this.#taps.set(owner.runtimeId, tap);
      this.#attached.set(owner.runtimeId, { subject, tap, identity: identityAddress(slotOfTap(tap)!) });
    }
    await this.#tell('replaceAll', [...this.#attached.values()]);
    await this.#writeRuleset();
  }

  /** Stops the listeners. The TAPs and the table stay for the VMs that keep running; a table with no TAP left goes. */
  async close(): Promise<void> {
    if (this.#icmpTimer !== null) clearInterval(this.#icmpTimer);
    await this.#exclusive(async () => {
      if (this.#taps.size === 0) await removeRuleset(this.#table).catch(() => undefined);
    });
    await this.#listeners.close();
  }

  /**
   * Tells the listeners of a change. While their process is being started again the change is
   * not lost: the new process is given every attached runtime before anything else.
   */
  async #tell(method: 'add' | 'update' | 'remove' | 'replaceAll', args: unknown): Promise<void> {
    const link = await this.#listeners.ready();
    try {
      await link?.call(method, args);
    } catch (err) {
      if (!(err instanceof LinkClosedError)) throw err;
    }
  }

  /** What the listeners may ask, each call checked against what they were given (gateway-requests.ts). */
  #answer(link: PartLink): void {
    const hooks = (): GatewayHooks => {
      if (this.#hooks === null) throw new Error('gateway not connected to the core');
      return this.#hooks;
    };
    const context = () => ({ attached: this.#attached, hooks: hooks(), dnsOverride: this.#dnsOverride });
    for (const method of ['revealSecret', 'activity', 'ingressTarget', 'dnsOverride'] as const) {
      link.handle(method, (args) => checkedListenerCall(method, args, context()));
    }
    link.handle('audits', (args) => {
      const refused = checkedAuditBatch(args, context());
      if (refused > 0) this.opts.log.warn({ refused }, 'the gateway process sent audits it may not record; they were dropped');
      return null;
    });
  }

  /** The lowest slot whose TAP exists nowhere on the host (other instances' included) and that is not resting. */
  async #freeTap(): Promise<string> {
    return this.#slots.lowestFree(new Set([...this.#taps.values(), ...(await listTaps()).map((t) => t.tap)]));
  }

  /**
   * Makes the runtime's TAP on the lowest free slot. Another service instance on this host may
   * take the same slot between our look and our add (the kernel refuses the second add): the
   * slot is then no longer free, and the next look passes it over.
   */
  async #createFreeTap(runtimeId: string): Promise<string> {
    for (let attempt = 1; ; attempt++) {
      const tap = await this.#freeTap();
      try {
        await createTap(tap, { instance: this.opts.instance, runtimeId }, identityAddress(slotOfTap(tap)!));
        return tap;
      } catch (err) {
        const takenMeanwhile = (await listTaps()).some((t) => t.tap === tap && t.owner?.instance !== this.opts.instance);
        if (!takenMeanwhile || attempt >= TAP_ATTEMPTS) throw err;
      }
    }
  }

  get #table(): string {
    return `vessel_${this.opts.instance}`;
  }

  #exclusive<T>(work: () => Promise<T>): Promise<T> {
    const next = this.#queue.then(work);
    this.#queue = next.catch(() => undefined);
    return next;
  }

  /** The table names TAPs by their index (nftables.ts): one that is gone from the host, whoever removed it, is left out rather than fail the load. */
  async #writeRuleset(): Promise<void> {
    const present = new Set((await listTaps()).map((t) => t.tap));
    await applyRuleset({
      table: this.#table,
      proxyPort: this.opts.proxyPort,
      dnsPort: this.opts.dnsPort,
      attachments: [...this.#taps.values()].filter((tap) => present.has(tap)).map((tap) => ({ tap, identity: identityAddress(slotOfTap(tap)!) })),
    });
  }

  async #auditIcmp(): Promise<void> {
    try {
      const counts = await takeIcmpCounts(this.#table);
      for (const { subject, tap } of this.#attached.values()) {
        const count = counts.get(tap);
        if (count !== undefined) this.#hooks?.audit(subject.runtimeId, subject.tenantId, 'icmp_drop', { action: 'deny', host: null, ip: null, port: null, reason: 'icmp_dropped', count });
      }
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message }, 'could not read ICMP counters');
    }
  }
}
