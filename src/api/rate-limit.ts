/** Token buckets: `ratePerSec` refill, `burst` capacity, one per key (a bearer token, a client address). */

export interface RateLimitConfig {
  ratePerSec: number;
  burst: number;
}

interface Bucket {
  tokens: number;
  at: number;
}

/** Keys are bounded: a client can choose its address, and an IPv6 host has many. */
const MAX_KEYS = 100_000;

export class RateLimiter {
  readonly #buckets = new Map<string, Bucket>();

  constructor(private readonly config: RateLimitConfig) {}

  /** Returns 0 when the request may go ahead, else the seconds to wait. */
  take(key: string, now = Date.now()): number {
    const { ratePerSec, burst } = this.config;
    if (ratePerSec <= 0) return 0;
    let b = this.#buckets.get(key);
    if (b === undefined) {
      if (this.#buckets.size >= MAX_KEYS) this.#makeRoom(now);
      this.#buckets.set(key, (b = { tokens: burst, at: now }));
    }
    b.tokens = this.#level(b, now);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / ratePerSec));
  }

  #level(b: Bucket, now: number): number {
    return Math.min(this.config.burst, b.tokens + ((now - b.at) / 1000) * this.config.ratePerSec);
  }

  /**
   * Forgets the buckets that have refilled (a new one would be the same); if every bucket is
   * still in use, the longest-known ones, whose holders get a fresh burst. Runs once per tenth
   * of MAX_KEYS new keys at most, so a flood of new addresses costs O(1) per request.
   */
  #makeRoom(now: number): void {
    for (const [key, b] of this.#buckets) if (this.#level(b, now) >= this.config.burst) this.#buckets.delete(key);
    for (const key of this.#buckets.keys()) {
      if (this.#buckets.size < MAX_KEYS * 0.9) break;
      this.#buckets.delete(key);
    }
  }
}
