/** Audits of egress decisions, newest first. */
import type { Audit, AuditFilter } from './api-types.js';
import { Paged, pageQuery, type ListOptions } from './paging.js';
import type { CallOptions, Transport } from './transport.js';

export type AuditListOptions = ListOptions & Omit<AuditFilter, 'limit'>;

export class Audits {
  constructor(private readonly t: Transport) {}

  /** Filtered by `category` and `runtime` (id or name). Pages are followed if the service hands out tokens. */
  list(options: AuditListOptions = {}): Paged<Audit> {
    const filter = { ...(options.category === undefined ? {} : { category: options.category }), ...(options.runtime === undefined ? {} : { runtime: options.runtime }) };
    return new Paged((pageToken) =>
      // The served document gives the audit list no page_token yet, so the query is typed as the filter.
      this.t.body('idempotent', options as CallOptions, (signal) => this.t.api.GET('/v1/audits', { params: { query: { ...filter, ...pageQuery(options, pageToken) } as AuditFilter }, signal })),
    );
  }
}
