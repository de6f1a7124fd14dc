/**
 * Background processes of a runtime (docs/processes.md): start, list, get, their output from any
 * offset, stdin, signals, and forgetting an exited one.
 */
import type { Process, ProcessStartRequest, SignalName } from './api-types.js';
import { rawBody, type BodySource } from './body.js';
import { CommandStream, type OutputHandlers } from './command-stream.js';
import { commandEvents, outputEnd, type OutputEnd, type Positioned } from './output.js';
import { retryWait, sleep } from './retry.js';
import { serverEvents } from './server-events.js';
import { connectionError, VesselError } from './errors.js';
import type { CallOptions, Transport } from './transport.js';

export interface OutputOptions extends CallOptions, OutputHandlers {
  /** Resume here: a stream's `position` ("stdout,stderr" offsets), or a stdout offset. Default: the oldest byte the guest keeps. */
  since?: string | undefined;
  /** false: stop at the output that exists now (an `end` event) instead of following to the exit. */
  follow?: boolean | undefined;
}

export type ProcessOutput = CommandStream<OutputEnd>;

export class Processes {
  constructor(
    private readonly t: Transport,
    private readonly runtimeId: string,
  ) {}

  /** Starts a process that outlives this request; it answers once the process runs. */
  start(body: ProcessStartRequest, options?: CallOptions): Promise<Process> {
    const path = { runtime_id: this.runtimeId };
    return this.t.call('not-idempotent', options, (signal) => this.t.api.POST('/v1/runtimes/{runtime_id}/processes', { params: { path }, body, signal }));
  }

  /** Every process the guest keeps, running or exited. */
  list(options?: CallOptions): Promise<Process[]> {
    const path = { runtime_id: this.runtimeId };
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes/{runtime_id}/processes', { params: { path }, signal }));
  }

  get(processId: number, options?: CallOptions): Promise<Process> {
    const path = this.#path(processId);
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes/{runtime_id}/processes/{process_id}', { params: { path }, signal }));
  }

  /**
   * Its output as a stream of events. A connection that breaks while reading is opened again
   * from the last position read (with the retry policy's backoff and bound), so the consumer sees
   * no gap and no repeat; bytes the guest's ring dropped meanwhile are counted in `chunk.lost`.
   */
  async output(processId: number, options: OutputOptions = {}): Promise<ProcessOutput> {
    const abort = new AbortController();
    const signal = options.signal === undefined ? abort.signal : AbortSignal.any([options.signal, abort.signal]);
    const open = async (since: string | undefined) => {
      const answer = await this.t.send('idempotent', { signal }, (s) =>
        this.t.api.GET('/v1/runtimes/{runtime_id}/processes/{process_id}/output', {
          params: { path: this.#path(processId), query: { ...(since === undefined ? {} : { since }), ...(options.follow === undefined ? {} : { follow: options.follow }) } },
          headers: { accept: 'text/event-stream' },
          parseAs: 'stream',
          signal: s,
        }),
      );
      const requestId = answer.response.headers.get('x-request-id') ?? undefined;
      return commandEvents(serverEvents(answer.data as ReadableStream<Uint8Array>), outputEnd, requestId);
    };
    // The first connection is made here, so that refusals (no such process) are thrown by output().
    const first = await open(options.since);
    return new CommandStream(this.#resuming(first, open, options.since, signal), options, abort);
  }

  /** Writes to its stdin; `eof` closes stdin after. Resolves with the bytes the guest took. */
  async stdin(processId: number, data: BodySource, options: CallOptions & { eof?: boolean | undefined } = {}): Promise<number> {
    const raw = rawBody(data, 'application/octet-stream', 'not-idempotent');
    const query = options.eof === undefined ? {} : { eof: options.eof };
    const written = await this.t.call(raw.safety, options, (signal) =>
      this.t.api.POST('/v1/runtimes/{runtime_id}/processes/{process_id}/stdin', { params: { path: this.#path(processId), query }, ...raw.init, signal }),
    );
    return written.bytes;
  }

  /** Sends a signal to it and, unless `tree` is false, every descendant. */
  async signal(processId: number, signalName: SignalName, options: CallOptions & { tree?: boolean | undefined } = {}): Promise<void> {
    const body = { signal: signalName, ...(options.tree === undefined ? {} : { tree: options.tree }) };
    await this.t.call('not-idempotent', options, (signal) =>
      this.t.api.POST('/v1/runtimes/{runtime_id}/processes/{process_id}/signal', { params: { path: this.#path(processId) }, body, signal }),
    );
  }

  /** Drops an exited process and its kept output (failed_precondition while it runs). */
  async forget(processId: number, options?: CallOptions): Promise<void> {
    await this.t.call('idempotent', options, (signal) => this.t.api.DELETE('/v1/runtimes/{runtime_id}/processes/{process_id}', { params: { path: this.#path(processId) }, signal }));
  }

  #path(processId: number) {
    return { runtime_id: this.runtimeId, process_id: processId };
  }

  /** The events of `first`, and of each connection opened again after one broke. */
  async *#resuming(
    first: AsyncIterable<Positioned<OutputEnd>>,
    open: (since: string | undefined) => Promise<AsyncIterable<Positioned<OutputEnd>>>,
    since: string | undefined,
    signal: AbortSignal,
  ): AsyncGenerator<Positioned<OutputEnd>, void, undefined> {
    let position = since;
    let events = first;
    let started = false;
    for (let failures = 0; ; ) {
      let broken: VesselError;
      try {
        for await (const positioned of events) {
          const { event, id } = positioned;
          if (id !== undefined) position = id;
          failures = 0;
          // Each connection starts with the process: the consumer has seen it once.
          if (event.type === 'start' && started) continue;
          started = true;
          yield positioned;
          if (event.type === 'exit' || event.type === 'end') return;
        }
        broken = new VesselError('unavailable', 'the output stream ended before the process did', { status: 0 });
      } catch (err) {
        if (signal.aborted || !(err instanceof TypeError)) throw err;
        broken = connectionError(err);
      }
      const delay = retryWait(failures, broken, 'idempotent', this.t.retry);
      if (delay === null) throw broken;
      failures++;
      await sleep(delay, signal);
      events = await open(position);
    }
  }
}
