/** Egress audits: recorded by the gateway, listed by tenants. */
import { notFound } from './errors.js';
import { isUuid } from './names.js';
import type { AuditRetention, Store } from './ports.js';
import type { Audit, Page, PageRequest } from './types.js';

/**
 * Retention is per tenant, so that one tenant's flood of denied connections evicts nothing of
 * another's; and a runtime keeps its newest thousand whatever its siblings record, so that one
 * noisy guest does not erase what its tenant needs to see of the others.
 */
export const AUDIT_RETENTION: AuditRetention = { perTenant: 100_000, perRuntime: 1_000 };

/**
 * A tenant is pruned once it has recorded this many audits since its last prune. A prune costs
 * a walk over its runtimes' floors plus each deleted row, so in batches of this size it costs
 * less per audit than recording one. The count lives in memory: a tenant holds at most this many
 * beyond its retention, twice that across a restart.
 */
export const PRUNE_AFTER = 5_000;

/**
 * `text` as an audit may store it: every control byte (C0, DEL, C1) spelled `\xNN` and a
 * backslash spelled `\\`, so the escape cannot be forged, cut to at most `max` characters without
 * splitting an escape. Audit fields are fed from guest bytes (an SNI, a Host header, a path) and
 * read on operators' terminals: a guest's `ESC ] 52 ; … BEL` (a clipboard write) or `ESC [2K`
 * must arrive there as text, never as a command. One pass, linear in what is kept.
 */
export function auditText(text: string, max: number): { text: string; cut: boolean } {
  let out = '';
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    const piece = c < 0x20 || (c >= 0x7f && c <= 0x9f) ? `\\x${c.toString(16).padStart(2, '0')}` : c === 0x5c ? '\\\\' : text[i]!;
    if (out.length + piece.length > max) return { text: out, cut: true };
    out += piece;
  }
  return { text: out, cut: false };
}

export interface AuditQuery extends PageRequest {
  category?: string | undefined;
  runtime?: string | undefined;
}

export class AuditService {
  /** Audits recorded per tenant since its last prune. */
  readonly #sincePrune = new Map<string, number>();

  constructor(private readonly store: Store) {}

  async list(tenantId: string, q: AuditQuery): Promise<Page<Audit>> {
    let runtimeId: string | undefined;
    if (q.runtime !== undefined) {
      const rt = await this.store.runtimes.find(tenantId, q.runtime);
      // Audits outlive their runtime, so a deleted runtime's UUID still filters.
      if (rt !== undefined) runtimeId = rt.id;
      else if (isUuid(q.runtime)) runtimeId = q.runtime.toLowerCase();
      else throw notFound('runtime', q.runtime);
    }
    return this.store.audits.list(tenantId, { category: q.category, runtimeId, limit: q.limit, pageToken: q.pageToken });
  }

  async record(audits: Audit[]): Promise<void> {
    if (audits.length === 0) return;
    await this.store.audits.insert(audits);
    for (const a of audits) this.#sincePrune.set(a.tenantId, (this.#sincePrune.get(a.tenantId) ?? 0) + 1);
  }

  /** Prunes the tenants that recorded PRUNE_AFTER audits or more since their last prune; the others are left alone. */
  async prune(): Promise<number> {
    const due = [...this.#sincePrune].filter(([, n]) => n >= PRUNE_AFTER).map(([tenantId]) => tenantId);
    if (due.length === 0) return 0;
    for (const tenantId of due) this.#sincePrune.delete(tenantId);
    return this.store.audits.prune(due, AUDIT_RETENTION);
  }
}
