/**
 * Bearer tokens of every tenant (docs/api.md, "Tokens"): for a client whose token has the admin
 * scope. A new token's value is in create()'s answer only.
 */
import type { Token, TokenCreated, TokenCreateRequest } from './api-types.js';
import { Paged, pageQuery, type ListOptions } from './paging.js';
import type { CallOptions, Transport } from './transport.js';

export interface TokenListOptions extends ListOptions {
  /** Only this tenant's tokens. */
  tenant?: string | undefined;
}

export class Tokens {
  constructor(private readonly t: Transport) {}

  /** Makes a token; `token` in the answer is its value, which the service never shows again. */
  create(body: TokenCreateRequest, options?: CallOptions): Promise<TokenCreated> {
    return this.t.call('not-idempotent', options, (signal) => this.t.api.POST('/v1/tokens', { body, signal }));
  }

  /** Newest first, revoked ones included; never a value. */
  list(options: TokenListOptions = {}): Paged<Token> {
    const filter = options.tenant === undefined ? {} : { tenant: options.tenant };
    return new Paged((pageToken) => this.t.body('idempotent', options, (signal) => this.t.api.GET('/v1/tokens', { params: { query: { ...filter, ...pageQuery(options, pageToken) } }, signal })));
  }

  /** By id. */
  get(id: string, options?: CallOptions): Promise<Token> {
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/tokens/{token_id}', { params: { path: { token_id: id } }, signal }));
  }

  /** Revokes it at once; answers with its record. Revoking a revoked token changes nothing. */
  revoke(id: string, options?: CallOptions): Promise<Token> {
    return this.t.call('idempotent', options, (signal) => this.t.api.DELETE('/v1/tokens/{token_id}', { params: { path: { token_id: id } }, signal }));
  }
}
