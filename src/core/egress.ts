/**
 * The core's side of the network gateway: what it enforces per runtime (policy plus rules), the
 * hooks it calls back (secret values, audits, activity), and batching of its audits.
 */
import { randomUUID } from 'node:crypto';
import { auditText, type AuditService } from './audits.js';
import type { EgressSubject, GatewayHooks, NetworkGateway, RevealedSecret, SecretUnsealer, Store } from './ports.js';
import type { Logger } from './runtimes.js';
import type { SecretService } from './secrets.js';
import type { Audit, EgressAuditDetail, EgressAuditDetails, EgressAuditKind, Runtime } from './types.js';

/** Audits are written in batches: one transaction per interval, not one per connection. */
const AUDIT_FLUSH_MS = 250;
/**
 * Audits held while the store refuses them (a full disk, a lock held by the CLI): they are kept
 * and written with the next batch, up to this many; past it the oldest go, and the log says how
 * many. Bounds the memory a guest's denied connections can take while audits cannot be stored.
 */
const MAX_UNWRITTEN_AUDITS = 50_000;

/**
 * The longest text an audit keeps of one field (a host, a path, an SNI a guest made up), escapes
 * included. Retention counts audits, so this is what bounds the store's size: a guest sending
 * 16 KB names would otherwise make each of its tenant's 100,000 audits that large.
 */
export const MAX_AUDIT_FIELD_CHARS = 1024;

/**
 * `detail` as it is stored: each text field (and each text in a list field) escaped by
 * auditText and cut to MAX_AUDIT_FIELD_CHARS; `truncated` lists the fields cut. Every audit of
 * the gateway passes here, so no control byte a guest sent is ever stored, whichever field of
 * the gateway's (today: host from an SNI or a Host header, method, path) it came through.
 */
function storedDetail<D extends EgressAuditDetail>(detail: D): D {
  const cut: string[] = [];
  const out: Record<string, unknown> = { ...detail };
  const text = (field: string, value: string): string => {
    const safe = auditText(value, MAX_AUDIT_FIELD_CHARS);
    if (safe.cut && !cut.includes(field)) cut.push(field);
    return safe.text;
  };
  for (const [field, value] of Object.entries(detail)) {
    if (typeof value === 'string') out[field] = text(field, value);
    else if (Array.isArray(value)) out[field] = value.map((v: unknown) => (typeof v === 'string' ? text(field, v) : v));
  }
  if (cut.length > 0) out.truncated = cut;
  return out as D;
}

/** An egress audit as the process that saw it recorded it: its id and time are kept as given. */
export interface DeliveredAudit {
  id: string;
  /** When it was recorded, as an ISO 8601 time. */
  at: string;
  runtimeId: string;
  tenantId: string;
  kind: EgressAuditKind;
  detail: EgressAuditDetail;
}

function egressAudit(a: DeliveredAudit): Audit {
  const payload = { egress: { kind: a.kind, [a.kind]: storedDetail(a.detail) } };
  return { id: a.id, tenantId: a.tenantId, runtimeId: a.runtimeId, category: 'egress', payload, createdAt: a.at };
}

export class EgressService implements GatewayHooks {
  #pending: Audit[] = [];
  #flushTimer: NodeJS.Timeout | null = null;
  #flushing: Promise<void> = Promise.resolve();

  constructor(
    private readonly store: Store,
    private readonly gateway: NetworkGateway,
    private readonly secrets: SecretService,
    private readonly audits: AuditService,
    private readonly onActivity: (runtimeId: string) => void,
    private readonly log: Logger,
    /** The VM host this process is; null on a single host. Its gateway serves only its own runtimes. */
    private readonly node: string | null = null,
    /** Where secrets are opened when this process holds no master key (an enrolled VM host); null: here. */
    private readonly unsealer: SecretUnsealer | null = null,
  ) {}

  async subject(rt: Runtime): Promise<EgressSubject> {
    return { runtimeId: rt.id, tenantId: rt.tenantId, policy: rt.egressPolicy, rules: await this.store.rules.listForRuntime(rt.id) };
  }

  /** The runtime's TAP, made if needed, with its policy in force. */
  async attach(rt: Runtime): Promise<string> {
    return this.gateway.attach(await this.subject(rt));
  }

  detach = (runtimeId: string): Promise<void> => this.gateway.detach(runtimeId);

  /** Policy or rules changed: resolves once the gateway applies them to the next connection. */
  async refresh(runtimeId: string): Promise<void> {
    const rt = await this.store.runtimes.findById(runtimeId);
    if (rt !== undefined && rt.node === this.node) await this.gateway.update(await this.subject(rt));
  }

  async restore(): Promise<void> {
    const runtimes = (await this.store.runtimes.listAll()).filter((rt) => rt.status !== 'deleting' && rt.node === this.node);
    await this.gateway.restore(await Promise.all(runtimes.map((rt) => this.subject(rt))));
  }

  /** Opened here with the master key, or, on a VM host that holds none, by an API node (`unsealer`). */
  revealSecret(tenantId: string, secretId: string): Promise<RevealedSecret | null> {
    return this.unsealer === null ? this.secrets.reveal(tenantId, secretId) : this.unsealer.unseal(tenantId, secretId);
  }

  audit<K extends EgressAuditKind>(runtimeId: string, tenantId: string, kind: K, detail: EgressAuditDetails[K]): void {
    this.#pending.push(egressAudit({ id: randomUUID(), at: new Date().toISOString(), runtimeId, tenantId, kind, detail }));
    this.#flushTimer ??= setTimeout(() => void this.flush(), AUDIT_FLUSH_MS);
  }

  /**
   * Stores audits another process recorded (the service's root, for its gateway), each with the
   * id and time it gave it. Resolves once they are stored and rejects when the store refuses
   * them, so that the sender keeps them and sends them again; one sent twice is stored once.
   */
  async storeAudits(delivered: DeliveredAudit[]): Promise<void> {
    await this.audits.record(delivered.map(egressAudit));
    await this.audits.prune().catch((err: unknown) => this.log.error({ err }, 'audits could not be pruned'));
  }

  activity(runtimeId: string): void {
    this.onActivity(runtimeId);
  }

  /**
   * Ingress routes by runtime id alone: display names are unique only per tenant, so routing by
   * name would let one tenant make another's URL ambiguous, or take its traffic once it deletes.
   * One indexed lookup, since this runs for every unauthenticated ingress connection.
   */
  async ingressTarget(runtimeId: string, port: number): Promise<{ runtimeId: string; protocol: 'http' | 'https' } | null> {
    const rt = await this.store.runtimes.findById(runtimeId);
    if (rt === undefined || rt.status !== 'running' || rt.node !== this.node) return null;
    const spec = rt.ingressSpecs.find((s) => s.runtime_port === port);
    return spec === undefined ? null : { runtimeId: rt.id, protocol: spec.protocol };
  }

  /**
   * Writes pending audits; resolves once everything recorded so far was written, or put back for
   * the next batch if the store refused it. Never rejects, so one failed write stops neither later
   * batches nor shutdown.
   */
  flush(): Promise<void> {
    if (this.#flushTimer !== null) clearTimeout(this.#flushTimer);
    this.#flushTimer = null;
    this.#flushing = this.#flushing.then(async () => {
      const batch = this.#pending;
      this.#pending = [];
      if (batch.length === 0) return;
      try {
        await this.audits.record(batch);
        await this.audits.prune();
      } catch (err) {
        this.#putBack(batch, err);
      }
    });
    return this.#flushing;
  }

  #putBack(batch: Audit[], err: unknown): void {
    const held = [...batch, ...this.#pending];
    const dropped = Math.max(0, held.length - MAX_UNWRITTEN_AUDITS);
    this.#pending = held.slice(dropped);
    this.log.error({ err, held: this.#pending.length, dropped }, 'audits could not be stored; kept for the next batch');
    // A retry alone keeps no process alive (a closed store would otherwise retry forever).
    this.#flushTimer ??= setTimeout(() => void this.flush(), AUDIT_FLUSH_MS).unref();
  }
}
