/**
 * A template build's log, as `GET /v1/templates/{name}/build` streams it (docs/templates.md,
 * "The build log"): each step's start, its output, its end with its duration and whether it came
 * from the cache, and the build's end. Every reader gets the whole log from its first event, and
 * then what comes, until the end.
 *
 * Bounded: a build's output past MAX_LOG_OUTPUT_BYTES is left out of the log (one event says how
 * much was, at the end of each step), while the step events still come; the failing step's output
 * tail is kept apart (`tail`), for the template's `failure`.
 */
import type { TemplateFailure, TemplateState } from './types.js';

export const MAX_LOG_OUTPUT_BYTES = 1024 * 1024;
/** The end of the failing step's output that a failed template keeps. */
export const FAILURE_TAIL_BYTES = 4096;

export type BuildEvent =
  | { event: 'step'; step: number; name: string }
  | { event: 'output'; step: number; text: string }
  | { event: 'step_done'; step: number; duration_ms: number; cached: boolean; exit_code: number | null; output_omitted_bytes?: number }
  | { event: 'done'; state: Exclude<TemplateState, 'building'>; failure: TemplateFailure | null };

/** What a builder reports as it goes; the log times the steps. */
export interface BuildReporter {
  /** A step begins (the one before it ended well). */
  step(name: string, opts?: { cached?: boolean }): void;
  /** Output of the step running: text, already decoded. */
  output(text: string): void;
}

/** The end of `text` within `bytes` UTF-8 bytes, cut at a character. */
export function utf8Tail(text: string, bytes: number): string {
  const buf = Buffer.from(text, 'utf8');
  if (buf.length <= bytes) return text;
  let start = buf.length - bytes;
  while (start < buf.length && (buf[start]! & 0xc0) === 0x80) start++;
  return buf.subarray(start).toString('utf8');
}

export class BuildLog implements BuildReporter {
  readonly #events: BuildEvent[] = [];
  #waiters: Array<() => void> = [];
  #outputBytes = 0;
  #current: { step: number; name: string; startedAt: number; cached: boolean; omitted: number; tail: string } | null = null;
  #steps = 0;
  #done = false;

  constructor(private readonly now: () => number = Date.now) {}

  get done(): boolean {
    return this.#done;
  }

  /** The step running, or the last one: the one a failure names. */
  get currentStep(): string | null {
    return this.#current?.name ?? null;
  }

  /** The end of the current step's output (within FAILURE_TAIL_BYTES), omitted output included. */
  get tail(): string {
    return this.#current?.tail ?? '';
  }

  step(name: string, opts: { cached?: boolean } = {}): void {
    if (this.#done) return;
    this.#endStep(null);
    this.#steps++;
    this.#current = { step: this.#steps, name, startedAt: this.now(), cached: opts.cached === true, omitted: 0, tail: '' };
    this.#push({ event: 'step', step: this.#steps, name });
  }

  output(text: string): void {
    const cur = this.#current;
    if (this.#done || cur === null || text === '') return;
    cur.tail = utf8Tail(cur.tail + text, FAILURE_TAIL_BYTES);
    const bytes = Buffer.byteLength(text, 'utf8');
    if (this.#outputBytes + bytes > MAX_LOG_OUTPUT_BYTES) {
      cur.omitted += bytes;
      return;
    }
    this.#outputBytes += bytes;
    this.#push({ event: 'output', step: cur.step, text });
  }

  /** Ends the build: the step running ends with `exitCode` when it failed, then the `done` event. */
  finish(state: 'ready' | 'failed', failure: TemplateFailure | null): void {
    if (this.#done) return;
    this.#endStep(failure?.exitCode ?? null);
    this.#push({ event: 'done', state, failure });
    this.#done = true;
  }

  /** The whole log, then what comes until the end; stops early when `signal` aborts. */
  async *read(signal?: AbortSignal): AsyncGenerator<BuildEvent> {
    let next = 0;
    for (;;) {
      while (next < this.#events.length) yield this.#events[next++]!;
      if (this.#done || signal?.aborted === true) return;
      await new Promise<void>((resolve) => {
        const wake = () => {
          signal?.removeEventListener('abort', wake);
          resolve();
        };
        this.#waiters.push(wake);
        signal?.addEventListener('abort', wake, { once: true });
      });
    }
  }

  #endStep(exitCode: number | null): void {
    const cur = this.#current;
    if (cur === null) return;
    const done: BuildEvent = { event: 'step_done', step: cur.step, duration_ms: Math.max(0, this.now() - cur.startedAt), cached: cur.cached, exit_code: exitCode };
    if (cur.omitted > 0) done.output_omitted_bytes = cur.omitted;
    this.#push(done);
  }

  #push(event: BuildEvent): void {
    this.#events.push(event);
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }
}
