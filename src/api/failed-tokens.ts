/**
 * Tokens the store refused a moment ago (unknown or revoked), so that a client repeating one costs
 * no store read. Bounded in entries and in bytes, since the values are the client's to choose:
 * past either bound the least recently seen go first; an entry lives `ttlMs` from its failure.
 */

export interface FailedTokenLimits {
  entries: number;
  bytes: number;
  ttlMs: number;
}

/**
 * 10 s: long enough that a client retrying a wrong token every second asks the store once in ten;
 * short enough that a token which did not exist then (a bootstrap admin token another API node
 * has just installed) is accepted soon after. 10,000 entries of our token's 47 characters take
 * about 1 MiB with the map's own cost.
 */
export const FAILED_TOKEN_LIMITS: FailedTokenLimits = { entries: 10_000, bytes: 1024 * 1024, ttlMs: 10_000 };

/** A rough cost of one entry beyond its characters (the map slot, the number), for the byte bound. */
const ENTRY_OVERHEAD = 64;
const cost = (token: string): number => token.length + ENTRY_OVERHEAD;

export class FailedTokens {
  /** Token → when it expires; the map's order is recency, least recent first. */
  readonly #until = new Map<string, number>();
  #bytes = 0;

  constructor(private readonly limits: FailedTokenLimits = FAILED_TOKEN_LIMITS) {}

  get size(): number {
    return this.#until.size;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** Whether `token` failed within the TTL; a hit makes it the most recently seen. */
  has(token: string, now = Date.now()): boolean {
    const until = this.#until.get(token);
    if (until === undefined) return false;
    this.#forget(token);
    if (until <= now) return false;
    this.#remember(token, until);
    return true;
  }

  add(token: string, now = Date.now()): void {
    if (cost(token) > this.limits.bytes || this.limits.entries < 1) return;
    if (this.#until.has(token)) this.#forget(token);
    this.#remember(token, now + this.limits.ttlMs);
    for (const oldest of this.#until.keys()) {
      if (this.#until.size <= this.limits.entries && this.#bytes <= this.limits.bytes) break;
      this.#forget(oldest);
    }
  }

  #remember(token: string, until: number): void {
    this.#until.set(token, until);
    this.#bytes += cost(token);
  }

  #forget(token: string): void {
    this.#until.delete(token);
    this.#bytes -= cost(token);
  }
}
