/**
 * Live data by polling. The API has no stream of runtime or audit changes (its only event streams
 * are a command's output), and a list of runtimes is one indexed read, so asking every few
 * seconds is cheap for the service and for the token's rate limit (200 requests a second by
 * default). A hidden tab does not poll, and it catches up at once when shown again; a poll starts
 * only after the last one ended, so a slow service is never asked twice at once.
 */

/** How often views poll while visible. */
export const POLL_MS = 3000;

export interface Poller {
  /** Polls now (after a change the user made); if a poll is running, again as soon as it ends. */
  now(): void;
  stop(): void;
}

export function poll(task: (signal: AbortSignal) => Promise<void>, everyMs = POLL_MS): Poller {
  const abort = new AbortController();
  let timer: ReturnType<typeof setTimeout> | undefined;
  let running = false;
  let again = false;
  const run = async (): Promise<void> => {
    clearTimeout(timer);
    if (abort.signal.aborted) return;
    if (running) {
      // Its answer may predate the change that asked for this one.
      again = true;
      return;
    }
    running = true;
    again = false;
    try {
      await task(abort.signal);
    } catch {
      // The task shows its own errors; the next poll tries again.
    } finally {
      running = false;
      if (again) void run();
      else if (!abort.signal.aborted && document.visibilityState === 'visible') timer = setTimeout(() => void run(), everyMs);
    }
  };
  const onVisibility = (): void => {
    if (document.visibilityState === 'visible') void run();
  };
  document.addEventListener('visibilitychange', onVisibility);
  void run();
  return {
    now: () => void run(),
    stop: () => {
      abort.abort();
      clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisibility);
    },
  };
}
