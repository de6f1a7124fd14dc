/**
 * The events of a command's output stream (docs/processes.md, "Streamed exec" and "Output and
 * reconnecting"), typed: the data of each event has its schema in the OpenAPI document
 * (ExecEvent, ProcessOutputEvent), and is read here into the SDK's objects.
 */
import type { components } from './generated/openapi.js';
import { errorFromEvent } from './errors.js';
import { base64ToBytes } from './encoding.js';
import type { EventSourceMessage } from './server-events.js';

export type Process = components['schemas']['Process'];
export type OutputChannel = 'stdout' | 'stderr';

type WireChunk = components['schemas']['OutputChunkEvent'];
type WireExit = components['schemas']['ExecExitEvent'];
type WireEnd = components['schemas']['OutputEndEvent'];

/** A piece of stdout or stderr. Text that is valid UTF-8 comes as text, anything else as bytes. */
export class OutputChunk {
  readonly channel: OutputChannel;
  /** Where these bytes start in their channel (bytes numbered from 0). */
  readonly offset: number;
  /** Bytes the guest's ring dropped before this chunk, unread: 0 unless the reader fell behind. */
  readonly lost: number;
  readonly #wire: WireChunk;

  constructor(channel: OutputChannel, wire: WireChunk) {
    this.channel = channel;
    this.offset = wire.offset;
    this.lost = wire.lost ?? 0;
    this.#wire = wire;
  }

  get bytes(): Uint8Array {
    return this.#wire.encoding === 'utf8' ? new TextEncoder().encode(this.#wire.data) : base64ToBytes(this.#wire.data);
  }

  /** The chunk as text; bytes that are not UTF-8 become U+FFFD. */
  get text(): string {
    return this.#wire.encoding === 'utf8' ? this.#wire.data : new TextDecoder().decode(this.bytes);
  }
}

/** The end of a streamed exec: exit_code is 128 + n when signal n ended it. */
export type ExecExit = { type: 'exit' } & WireExit;

/** The end of a process's output: it exited (follow), or what exists now was all sent (follow=false). */
export type OutputEnd = { type: 'exit'; process: Process } | { type: 'end'; next: string };

export interface StartEvent {
  type: 'start';
  process: Process;
}

export interface ChunkEvent {
  type: OutputChannel;
  chunk: OutputChunk;
}

/** The closing events: exec's `exit`, or an output stream's `exit` and `end`. */
export type EndEvent = { type: 'exit' | 'end' };

export type CommandEvent<End extends EndEvent> = StartEvent | ChunkEvent | End;

/** An event with the SSE id that came with it: the position right after it, as `since` takes it. */
export interface Positioned<End extends EndEvent> {
  event: CommandEvent<End>;
  id: string | undefined;
}

/** The end events of a streamed exec. */
export function execEnd(message: EventSourceMessage): ExecExit | undefined {
  if (message.event !== 'exit') return undefined;
  const exit = JSON.parse(message.data) as WireExit;
  return { type: 'exit', exit_code: exit.exit_code, duration_ms: exit.duration_ms };
}

/** The end events of a process's output. */
export function outputEnd(message: EventSourceMessage): OutputEnd | undefined {
  if (message.event === 'exit') return { type: 'exit', process: JSON.parse(message.data) as Process };
  if (message.event === 'end') return { type: 'end', next: (JSON.parse(message.data) as WireEnd).next };
  return undefined;
}

/**
 * Typed events of an output stream; `end` recognises its closing events. An `error` event is
 * thrown as the VesselError it carries. Events this SDK does not know (a newer service's) are
 * passed over.
 */
export async function* commandEvents<End extends EndEvent>(
  messages: AsyncIterable<EventSourceMessage>,
  end: (message: EventSourceMessage) => End | undefined,
  requestId: string | undefined,
): AsyncGenerator<Positioned<End>, void, undefined> {
  for await (const message of messages) {
    const id = message.id;
    switch (message.event) {
      case 'start':
        yield { event: { type: 'start', process: JSON.parse(message.data) as Process }, id };
        break;
      case 'stdout':
      case 'stderr':
        yield { event: { type: message.event, chunk: new OutputChunk(message.event, JSON.parse(message.data) as WireChunk) }, id };
        break;
      case 'error':
        throw errorFromEvent(JSON.parse(message.data), requestId);
      default: {
        const last = end(message);
        if (last !== undefined) {
          yield { event: last, id };
          return;
        }
      }
    }
  }
}
