/** Egress audits: recorded by the gateway, listed by tenants. */
import { notFound } from './errors.js';
import { isUuid } from './names.js';
import type { Store } from './ports.js';
import type { Audit } from './types.js';

export const AUDIT_RETENTION = 100_000;

export interface AuditQuery {
  category?: string | undefined;
  runtime?: string | undefined;
  limit: number;
}

export class AuditService {
  constructor(private readonly store: Store) {}

  async list(tenantId: string, q: AuditQuery): Promise<Audit[]> {
    let runtimeId: string | undefined;
    if (q.runtime !== undefined) {
      const rt = await this.store.runtimes.find(tenantId, q.runtime);
      // Audits outlive their runtime, so a deleted runtime's UUID still filters.
      if (rt !== undefined) runtimeId = rt.id;
      else if (isUuid(q.runtime)) runtimeId = q.runtime.toLowerCase();
      else throw notFound('runtime', q.runtime);
    }
    return this.store.audits.list(tenantId, { category: q.category, runtimeId, limit: q.limit });
  }

  async record(audits: Audit[]): Promise<void> {
    if (audits.length === 0) return;
    await this.store.audits.insert(audits);
  }

  prune = (): Promise<number> => this.store.audits.prune(AUDIT_RETENTION);
}
