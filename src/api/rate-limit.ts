/** Token buckets: `ratePerSec` refill, `burst` capacity, one per key (a bearer token, a client address). */
import { isIPv6 } from 'node:net';

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

  /** Gives back what a take() that returned 0 took, for a request that turned out not to count. */
  refund(key: string): void {
    const b = this.#buckets.get(key);
    if (b !== undefined) b.tokens = Math.min(this.config.burst, b.tokens + 1);
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

/**
 * The client a request's address stands for: an IPv4 address (also when mapped into IPv6), or
 * the /64 of an IPv6 address, which a single host or customer is usually given whole.
 */
export function clientKey(ip: string): string {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped !== null) return mapped[1]!;
  const address = ip.split('%', 1)[0]!;
  if (!isIPv6(address)) return ip;
  const [head = '', tail] = address.split('::');
  const headGroups = head === '' ? [] : head.split(':');
  const tailGroups = tail === undefined || tail === '' ? [] : tail.split(':');
  const zeros = tail === undefined ? [] : new Array<string>(Math.max(0, 8 - headGroups.length - tailGroups.length)).fill('0');
  const groups = [...headGroups, ...zeros, ...tailGroups].slice(0, 4);
  return `${groups.map((g) => parseInt(g, 16).toString(16)).join(':')}::/64`;
}
