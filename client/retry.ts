/**
 * When a failed request may be sent again, and how long to wait first. The service refuses a
 * rate-limited request before it does anything, so that one is safe to repeat whatever it asked
 * for; an unavailable answer may come after an effect, so only a request that is idempotent may
 * be repeated then. A body that was a stream is gone once sent, so such a request never is.
 */
import type { VesselError } from './errors.js';

export interface RetryPolicy {
  /** Attempts after the first; 0 turns retrying off. */
  maxRetries: number;
  /** The ceiling of the first wait; it doubles with each retry. */
  baseDelayMs: number;
  /** The ceiling of any one wait: a Retry-After longer than this is not waited for, the error is thrown. */
  maxDelayMs: number;
}

export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxRetries: 3, baseDelayMs: 250, maxDelayMs: 30_000 };

/**
 * What repeating a request would do:
 * - `idempotent`: the same as doing it once (GET, PUT, DELETE, and a POST such as mkdir -p);
 * - `not-idempotent`: maybe a second effect (create, exec, a lifecycle transition, a signal);
 * - `not-replayable`: its body was a stream that cannot be sent again.
 */
export type RequestSafety = 'idempotent' | 'not-idempotent' | 'not-replayable';

export function mayRetry(error: VesselError, safety: RequestSafety): boolean {
  if (safety === 'not-replayable') return false;
  if (error.code === 'rate_limited') return true;
  return error.code === 'unavailable' && safety === 'idempotent';
}

/**
 * The wait before retry number `retry` (0 for the first): Retry-After when the service gave one,
 * plus "full jitter" (a random part of an exponentially growing ceiling), so that clients refused
 * together do not all come back together. Null when the service asks for longer than the policy
 * allows one wait to be.
 */
export function retryDelayMs(retry: number, retryAfterSecs: number | undefined, policy: RetryPolicy, random: () => number = Math.random): number | null {
  const asked = (retryAfterSecs ?? 0) * 1000;
  if (asked > policy.maxDelayMs) return null;
  const ceiling = Math.min(policy.maxDelayMs - asked, policy.baseDelayMs * 2 ** retry);
  return asked + Math.floor(random() * ceiling);
}

/** The wait before retry number `retry` of a request that failed with `error`; null when it must not be retried. */
export function retryWait(retry: number, error: VesselError, safety: RequestSafety, policy: RetryPolicy): number | null {
  return retry < policy.maxRetries && mayRetry(error, safety) ? retryDelayMs(retry, error.retryAfterSecs, policy) : null;
}

/** Resolves after `ms`, or rejects with the signal's reason as soon as it aborts. */
export function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    // An aborted wait rejects with the signal's reason, whatever it is, as fetch() does.
    // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
    if (signal?.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      // eslint-disable-next-line @typescript-eslint/prefer-promise-reject-errors
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}
