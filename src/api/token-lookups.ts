/**
 * Tokens the cache does not know, decided at the least cost to the store. A valid token must
 * always reach the store (no address bucket stands in front of it), so the store is protected by
 * what a token is rather than by where it comes from:
 * - a token that cannot be ours by its shape (TokenService.couldBeToken) is refused unread;
 * - a token the store refused within FailedTokens' TTL is refused unread;
 * - requests carrying the same token at once share one store read.
 */
import type { Principal } from '../core/types.js';
import type { TokenService } from '../core/tokens.js';
import { FAILED_TOKEN_LIMITS, FailedTokens, type FailedTokenLimits } from './failed-tokens.js';

export class TokenLookups {
  readonly #failed: FailedTokens;
  /** One per token being read from the store; bounded by the requests waiting on them. */
  readonly #pending = new Map<string, Promise<Principal | null>>();

  constructor(
    private readonly tokens: TokenService,
    limits: FailedTokenLimits = FAILED_TOKEN_LIMITS,
  ) {
    this.#failed = new FailedTokens(limits);
  }

  /**
   * null when `token` is refused without a store read; else the store's answer (null: not
   * accepted). Returning null synchronously keeps the refusal off the promise machinery.
   */
  principal(token: string): Promise<Principal | null> | null {
    if (!this.tokens.couldBeToken(token) || this.#failed.has(token)) return null;
    const pending = this.#pending.get(token);
    if (pending !== undefined) return pending;
    const lookup = this.tokens.authenticate(token).then(
      (principal) => {
        // Recorded before the lookup is forgotten, so that no request in between reads again.
        if (principal === null) this.#failed.add(token);
        this.#pending.delete(token);
        return principal;
      },
      (err: unknown) => {
        this.#pending.delete(token);
        throw err;
      },
    );
    this.#pending.set(token, lookup);
    return lookup;
  }
}
