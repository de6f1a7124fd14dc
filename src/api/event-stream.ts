/**
 * Server-sent events (text/event-stream) for output that comes as it is produced: the response
 * is taken over from Fastify, each event waits for the socket to take the previous one (so a
 * slow reader holds the producer back instead of growing a buffer here), and a comment line
 * every HEARTBEAT_MS keeps proxies from closing a quiet stream.
 */
import { isUtf8 } from 'node:buffer';
import type { FastifyReply, FastifyRequest } from 'fastify';
import type { OutputChannel, ProcessOutput } from '../core/types.js';
import { toVesselError } from './errors.js';

const HEARTBEAT_MS = 15_000;

export const wantsEventStream = (req: FastifyRequest): boolean => /\btext\/event-stream\b/i.test(req.headers.accept ?? '');

export class EventStream {
  readonly #reply: FastifyReply;
  readonly #heartbeat: NodeJS.Timeout;
  #closed = false;
  readonly #onClose: Array<() => void> = [];

  constructor(reply: FastifyReply) {
    this.#reply = reply;
    const raw = reply.raw;
    reply.hijack();
    raw.writeHead(200, {
      ...(reply.getHeaders() as Record<string, string>),
      'content-type': 'text/event-stream; charset=utf-8',
      'cache-control': 'no-store',
      // nginx buffers responses unless told not to.
      'x-accel-buffering': 'no',
    });
    raw.flushHeaders();
    this.#heartbeat = setInterval(() => raw.write(': keep-alive\n\n'), HEARTBEAT_MS);
    raw.on('close', () => this.#close());
  }

  /** True once the client went away or the stream ended. */
  get closed(): boolean {
    return this.#closed;
  }

  onClose(listener: () => void): void {
    if (this.#closed) listener();
    else this.#onClose.push(listener);
  }

  /** Resolves when the socket took the event (at once if the client is gone). */
  async send(event: string, data: unknown, id?: string): Promise<void> {
    if (this.#closed) return;
    const raw = this.#reply.raw;
    const text = `event: ${event}\n${id === undefined ? '' : `id: ${id}\n`}data: ${JSON.stringify(data)}\n\n`;
    if (raw.write(text)) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        raw.off('drain', done);
        raw.off('close', done);
        resolve();
      };
      raw.on('drain', done);
      raw.on('close', done);
    });
  }

  /** An `error` event with the envelope a JSON answer would have carried. */
  async fail(err: unknown): Promise<void> {
    const error = toVesselError(err);
    if (error.code === 'internal') this.#reply.request.log.error({ err: error.cause ?? err }, 'stream failed');
    await this.send('error', { error: { code: error.code, message: error.message } });
  }

  end(): void {
    if (!this.#closed) this.#reply.raw.end();
    this.#close();
  }

  #close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#heartbeat);
    for (const l of this.#onClose.splice(0)) l();
  }
}

/** The bytes at the end of `buf` that start a UTF-8 sequence still missing bytes (0 to 3). */
function incompleteTail(buf: Buffer): number {
  for (let back = 1; back <= Math.min(3, buf.length); back++) {
    const b = buf[buf.length - back]!;
    if ((b & 0xc0) === 0x80) continue; // a continuation byte: look further back
    const needs = b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc0 ? 2 : 1;
    return needs > back ? back : 0;
  }
  return 0;
}

export interface OutputEvent {
  /** Where `data` starts in its channel. */
  offset: number;
  data: string;
  encoding: 'utf8' | 'base64';
  /** Bytes the guest's ring dropped before this chunk (only when some were). */
  lost?: number;
}

/**
 * Output chunks as events: UTF-8 text when the bytes are valid UTF-8, base64 otherwise. A
 * character cut between two chunks is held back until its rest comes, so text is never
 * mangled at a chunk boundary; `next` counts only the bytes already sent, which is what a
 * client passes back to resume.
 */
export class OutputEncoder {
  readonly #carry = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
  readonly next: { stdout: number; stderr: number };

  constructor(start: { stdout: number; stderr: number }) {
    this.next = { ...start };
  }

  /** The SSE id of the stream's position: `stdout,stderr` offsets, as `since` takes them. */
  get id(): string {
    return `${this.next.stdout},${this.next.stderr}`;
  }

  /** The events for a chunk: usually one; none while a character is incomplete. */
  encode(chunk: ProcessOutput): OutputEvent[] {
    const events: OutputEvent[] = [];
    // Bytes were dropped after what is held back: that is sent alone, as it cannot be completed.
    if (chunk.lost > 0) events.push(...this.#flushChannel(chunk.channel));
    const carried = this.#carry[chunk.channel];
    const bytes = carried.length === 0 ? chunk.data : Buffer.concat([carried, chunk.data]);
    const offset = chunk.offset - carried.length;
    const keep = incompleteTail(bytes);
    const body = bytes.subarray(0, bytes.length - keep);
    let event: OutputEvent | null;
    if (isUtf8(body)) {
      this.#carry[chunk.channel] = Buffer.from(bytes.subarray(bytes.length - keep));
      event = body.length === 0 ? null : { offset, data: body.toString('utf8'), encoding: 'utf8' };
      this.next[chunk.channel] = offset + body.length;
    } else {
      this.#carry[chunk.channel] = Buffer.alloc(0);
      event = { offset, data: bytes.toString('base64'), encoding: 'base64' };
      this.next[chunk.channel] = offset + bytes.length;
    }
    if (event !== null) {
      if (chunk.lost > 0) event.lost = chunk.lost;
      events.push(event);
    }
    return events;
  }

  /** What is still held back at the end (an incomplete character), as base64 events. */
  flush(): Array<{ channel: OutputChannel; event: OutputEvent }> {
    return (['stdout', 'stderr'] as const).flatMap((channel) => this.#flushChannel(channel).map((event) => ({ channel, event })));
  }

  #flushChannel(channel: OutputChannel): OutputEvent[] {
    const rest = this.#carry[channel];
    if (rest.length === 0) return [];
    const event: OutputEvent = { offset: this.next[channel], data: rest.toString('base64'), encoding: 'base64' };
    this.next[channel] += rest.length;
    this.#carry[channel] = Buffer.alloc(0);
    return [event];
  }
}
