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

/** The streams each server has open, ended when it closes (they would otherwise hold it open). */
const openStreams = new WeakMap<object, Set<EventStream>>();

/** Ends every event stream of this Node server: for the app's preClose hook. */
export function endEventStreams(server: object): void {
  for (const stream of [...(openStreams.get(server) ?? [])]) stream.end();
}

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
    const server = reply.server.server; // the Node server, shared by every plugin scope
    const open = openStreams.get(server) ?? new Set<EventStream>();
    openStreams.set(server, open);
    open.add(this);
    this.#onClose.push(() => open.delete(this));
    raw.on('close', () => this.#close());
    // The client may have gone while the route awaited the guest: 'close' has fired already.
    if (raw.destroyed || reply.request.raw.socket?.destroyed !== false) this.#close();
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
    const raw = this.#reply.raw;
    if (this.#closed || raw.destroyed || raw.writableEnded) return;
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
    // 0xC0, 0xC1 and 0xF5 to 0xFF start no character: nothing to wait for.
    const needs = b >= 0xf5 ? 1 : b >= 0xf0 ? 4 : b >= 0xe0 ? 3 : b >= 0xc2 ? 2 : 1;
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

/** An event with its channel and its SSE id: the position right after it, as `since` takes it. */
export interface EncodedOutput {
  channel: OutputChannel;
  event: OutputEvent;
  id: string;
}

/**
 * Output chunks as events: UTF-8 text when the bytes are valid UTF-8, base64 otherwise. A
 * character cut between two chunks is held back until its rest comes, so text is never
 * mangled at a chunk boundary; ids count only the bytes already sent, which is what a client
 * passes back to resume.
 */
export class OutputEncoder {
  readonly #carry = { stdout: Buffer.alloc(0), stderr: Buffer.alloc(0) };
  /** Lost bytes not yet reported (the chunk after the gap produced no event yet). */
  readonly #lost = { stdout: 0, stderr: 0 };
  readonly next: { stdout: number; stderr: number };

  constructor(start: { stdout: number; stderr: number }) {
    this.next = { ...start };
  }

  get id(): string {
    return `${this.next.stdout},${this.next.stderr}`;
  }

  /** The events for a chunk: usually one; none while a character is incomplete. */
  encode(chunk: ProcessOutput): EncodedOutput[] {
    const { channel } = chunk;
    const out: EncodedOutput[] = [];
    // Bytes were dropped after what is held back: that is sent alone, as it cannot be completed.
    if (chunk.lost > 0) out.push(...this.#flushChannel(channel));
    this.#lost[channel] += chunk.lost;
    const carried = this.#carry[channel];
    const bytes = carried.length === 0 ? chunk.data : Buffer.concat([carried, chunk.data]);
    const offset = chunk.offset - carried.length;
    const keep = incompleteTail(bytes);
    const body = bytes.subarray(0, bytes.length - keep);
    if (isUtf8(body)) {
      this.#carry[channel] = Buffer.from(bytes.subarray(bytes.length - keep));
      if (body.length > 0) out.push(this.#emit(channel, { offset, data: body.toString('utf8'), encoding: 'utf8' }, body.length));
    } else {
      this.#carry[channel] = Buffer.alloc(0);
      out.push(this.#emit(channel, { offset, data: bytes.toString('base64'), encoding: 'base64' }, bytes.length));
    }
    return out;
  }

  /** What is still held back once the process ended (an incomplete character), as base64. */
  flush(): EncodedOutput[] {
    return (['stdout', 'stderr'] as const).flatMap((channel) => this.#flushChannel(channel));
  }

  #flushChannel(channel: OutputChannel): EncodedOutput[] {
    const rest = this.#carry[channel];
    if (rest.length === 0) return [];
    this.#carry[channel] = Buffer.alloc(0);
    return [this.#emit(channel, { offset: this.next[channel], data: rest.toString('base64'), encoding: 'base64' }, rest.length)];
  }

  #emit(channel: OutputChannel, event: OutputEvent, bytes: number): EncodedOutput {
    if (this.#lost[channel] > 0) event.lost = this.#lost[channel];
    this.#lost[channel] = 0;
    this.next[channel] = event.offset + bytes;
    return { channel, event, id: this.id };
  }
}
