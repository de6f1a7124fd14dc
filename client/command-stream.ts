/**
 * A command's output as it comes: an async iterator over its events, callbacks for stdout and
 * stderr, and `wait()` for its end. One consumer: iterating, then calling wait(), carries on
 * where the loop stopped, and leaving a loop early (break) closes the stream.
 */
import { VesselError } from './errors.js';
import type { ChunkEvent, CommandEvent, EndEvent, OutputChunk, Positioned, Process, StartEvent } from './output.js';

export interface OutputHandlers {
  onStdout?: ((text: string, chunk: OutputChunk) => void) | undefined;
  onStderr?: ((text: string, chunk: OutputChunk) => void) | undefined;
}

export class CommandStream<End extends EndEvent> implements AsyncIterable<CommandEvent<End>> {
  readonly #source: AsyncIterable<Positioned<End>>;
  readonly #handlers: OutputHandlers;
  readonly #abort: AbortController;
  #events: AsyncGenerator<CommandEvent<End>, void, undefined> | undefined;
  #process: Process | undefined;
  #position: string | undefined;
  #end: End | undefined;

  /** `abort` ends the request that `source` reads. */
  constructor(source: AsyncIterable<Positioned<End>>, handlers: OutputHandlers, abort: AbortController) {
    this.#source = source;
    this.#handlers = handlers;
    this.#abort = abort;
  }

  /** The process, once its `start` event has been read. */
  get process(): Process | undefined {
    return this.#process;
  }

  /** Where the output read so far ends ("stdout,stderr" offsets): `since` for processes.output(). */
  get position(): string | undefined {
    return this.#position;
  }

  [Symbol.asyncIterator](): AsyncGenerator<CommandEvent<End>, void, undefined> {
    return (this.#events ??= this.#read());
  }

  /** Reads to the end (the handlers see the output) and returns the closing event. */
  async wait(): Promise<End> {
    const events = this[Symbol.asyncIterator]();
    while ((await events.next()).done !== true);
    if (this.#end === undefined) throw new VesselError('unavailable', 'the output stream ended before the command did', { status: 0 });
    return this.#end;
  }

  /** Ends the stream; for an exec without `background`, the service then kills the command. */
  close(): void {
    this.#abort.abort();
  }

  async *#read(): AsyncGenerator<CommandEvent<End>, void, undefined> {
    try {
      for await (const { event, id } of this.#source) {
        if (id !== undefined) this.#position = id;
        // `End` is generic, so TypeScript cannot narrow the union by `type` alone.
        if (event.type === 'start') this.#process = (event as StartEvent).process;
        else if (event.type === 'stdout' || event.type === 'stderr') this.#chunk(event as ChunkEvent);
        else this.#end = event as End;
        yield event;
      }
    } finally {
      this.#abort.abort();
    }
  }

  #chunk({ type, chunk }: ChunkEvent): void {
    const handler = type === 'stdout' ? this.#handlers.onStdout : this.#handlers.onStderr;
    handler?.(chunk.text, chunk);
  }
}
