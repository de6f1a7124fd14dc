/** A token bucket per bearer token: `ratePerSec` refill, `burst` capacity. */
export interface RateLimitConfig {
  ratePerSec: number;
  burst: number;
}

export class RateLimiter {
  readonly #buckets = new Map<string, { tokens: number; at: number }>();

  constructor(private readonly config: RateLimitConfig) {}

  /** Returns 0 when the request may go ahead, else the seconds to wait. */
  take(key: string, now = Date.now()): number {
    const { ratePerSec, burst } = this.config;
    if (ratePerSec <= 0) return 0;
    const b = this.#buckets.get(key) ?? { tokens: burst, at: now };
    b.tokens = Math.min(burst, b.tokens + ((now - b.at) / 1000) * ratePerSec);
    b.at = now;
    this.#buckets.set(key, b);
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return Math.max(1, Math.ceil((1 - b.tokens) / ratePerSec));
  }
}
