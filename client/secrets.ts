/** Secrets: stored sealed by the service, injected by rules, and never shown again. */
import type { Secret, SecretCreateRequest } from './api-types.js';
import { Paged, pageQuery, type ListOptions } from './paging.js';
import type { CallOptions, Transport } from './transport.js';

export class Secrets {
  constructor(private readonly t: Transport) {}

  /** Stores a secret; the answer carries its metadata only. */
  create(body: SecretCreateRequest, options?: CallOptions): Promise<Secret> {
    return this.t.call('not-idempotent', options, (signal) => this.t.api.POST('/v1/secrets', { body, signal }));
  }

  list(options: ListOptions = {}): Paged<Secret> {
    return new Paged((pageToken) => this.t.body('idempotent', options, (signal) => this.t.api.GET('/v1/secrets', { params: { query: pageQuery(options, pageToken) }, signal })));
  }

  /** By id or name. */
  get(secret: string, options?: CallOptions): Promise<Secret> {
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/secrets/{secret_id}', { params: { path: { secret_id: secret } }, signal }));
  }

  /** By id or name; a secret that rules still use is failed_precondition. */
  async delete(secret: string, options?: CallOptions): Promise<void> {
    await this.t.call('idempotent', options, (signal) => this.t.api.DELETE('/v1/secrets/{secret_id}', { params: { path: { secret_id: secret } }, signal }));
  }
}
