/**
 * The channel between the service and one of its parts (a child process of its own, docs/security.md
 * "Processes"): requests with replies, and notifications, as JSON in length-prefixed frames over a
 * socket pair.
 *
 * Node's own IPC channel is not used: it buffers a message of any size before it parses it, and a
 * part is less trusted than the service (it parses what guests send). Here a frame's length is read
 * first and one above MAX_FRAME_BYTES ends the link, so a part that lost its mind costs its link,
 * never the service's memory. Each side names the methods it answers; a call of any other is refused.
 *
 * Byte streams (link-stream.ts) ride on the same link: a call names a stream its caller opened,
 * and the bytes go in data frames, which are binary (the top bit of the length word set, then
 * the stream, its chunk's meta and the bytes), so they are neither copied into JSON nor parsed.
 * A data frame's length is capped from its header too, and its bytes from the stream's credit.
 */
import type { Duplex } from 'node:stream';
import { LinkError, LinkStream, MAX_DATA_FRAME_BYTES, MAX_META_BYTES, type StreamWire } from './link-stream.js';

export { LinkError, LinkStream, StreamClosedError, STREAM_WINDOW } from './link-stream.js';

/** A frame holds one JSON message: the largest is a gateway's restore of every attached runtime's rules. */
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;
/** Calls the other side has not answered yet; past this a part is flooding, not working. */
const MAX_PENDING_CALLS = 10_000;
/** Streams one side may have open at once, each way. */
const MAX_STREAMS = 4096;
/** Set in a frame's length word: a data frame of a stream, not JSON. */
const DATA_FRAME = 0x8000_0000;
/** A data frame's own header: the stream (u32) and its meta's length (u16). */
const DATA_HEAD_BYTES = 6;

type StreamControl = { t: 'credit'; s: number; n: number } | { t: 'end'; s: number; value: unknown } | { t: 'fail'; s: number; error: { message: string; detail: unknown } } | { t: 'cancel'; s: number };

type Message =
  | { t: 'call'; id: number; method: string; args: unknown }
  | { t: 'reply'; id: number; ok: true; value: unknown }
  | { t: 'reply'; id: number; ok: false; error: string; detail?: unknown }
  | { t: 'note'; method: string; args: unknown }
  | StreamControl;

export type Handler = (args: unknown) => unknown;

export class LinkClosedError extends Error {}

export class PartLink {
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  readonly #handlers = new Map<string, Handler>();
  readonly #closeListeners: Array<(reason: string) => void> = [];
  #nextId = 1;
  #buffered: Buffer[] = [];
  #bufferedBytes = 0;
  /** The length of the frame being read, once its header is in, and whether it is a data frame. */
  #frameLength: number | null = null;
  #frameIsData = false;
  #closed: string | null = null;
  /** Streams this side opened, by id, and those the other side opened and this one accepted. */
  readonly #opened = new Map<number, LinkStream>();
  readonly #accepted = new Map<number, LinkStream>();
  /**
   * What the other side said about a stream it opened before this side accepted it (an upload
   * of no bytes ends at once, before the call that names it is handled): kept until it is
   * accepted, a few messages per stream and MAX_STREAMS streams at most, the oldest dropped.
   */
  readonly #early = new Map<number, StreamControl[]>();
  #nextStream = 1;
  /**
   * How each stream reaches the wire. A stream travels as its id doubled, plus one when the
   * sender of the frame did not open it: so each side numbers its own streams freely.
   */
  readonly #wire: StreamWire = {
    data: (stream, meta, data) => {
      const head = Buffer.alloc(4 + DATA_HEAD_BYTES);
      head.writeUInt32BE((DATA_FRAME | (DATA_HEAD_BYTES + meta.length + data.length)) >>> 0, 0);
      head.writeUInt32BE(this.#wireId(stream), 4);
      head.writeUInt16BE(meta.length, 8);
      if (this.#closed === null) this.socket.write(meta.length === 0 ? Buffer.concat([head, data]) : Buffer.concat([head, meta, data]));
    },
    control: (stream, message) => {
      if (this.#closed === null) this.#send({ ...message, s: this.#wireId(stream) } as StreamControl);
    },
    forget: (stream) => (stream.mine ? this.#opened : this.#accepted).delete(stream.id),
  };

  constructor(private readonly socket: Duplex) {
    socket.on('data', (chunk: Buffer) => this.#receive(chunk));
    socket.on('error', (err) => this.close(`link error: ${err.message}`));
    socket.on('close', () => this.close('the other side closed the link'));
  }

  /** Answers `method` from the other side; what it returns (or resolves with) is the reply. */
  handle(method: string, handler: Handler): this {
    this.#handlers.set(method, handler);
    return this;
  }

  onClose(listener: (reason: string) => void): void {
    if (this.#closed !== null) listener(this.#closed);
    else this.#closeListeners.push(listener);
  }

  get closed(): boolean {
    return this.#closed !== null;
  }

  call<T = unknown>(method: string, args: unknown = null): Promise<T> {
    if (this.#closed !== null) return Promise.reject(new LinkClosedError(this.#closed));
    if (this.#pending.size >= MAX_PENDING_CALLS) return Promise.reject(new Error(`more than ${MAX_PENDING_CALLS} calls are waiting for an answer`));
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.#send({ t: 'call', id, method, args });
    });
  }

  /** A message that wants no answer; lost when the link is down. */
  notify(method: string, args: unknown = null): void {
    if (this.#closed === null) this.#send({ t: 'note', method, args });
  }

  /**
   * A stream of this side's, to name in a call (by its `id`): `receives` when the other side
   * will send on it, `sends` when this one will.
   */
  openStream(directions: { receives: boolean; sends: boolean }): LinkStream {
    if (this.#closed !== null) throw new LinkClosedError(this.#closed);
    if (this.#opened.size >= MAX_STREAMS) throw new Error(`more than ${MAX_STREAMS} streams are open`);
    let id = this.#nextStream;
    while (this.#opened.has(id)) id = id >= 0x3fff_ffff ? 1 : id + 1;
    this.#nextStream = id >= 0x3fff_ffff ? 1 : id + 1;
    const stream = new LinkStream(id, true, directions, this.#wire);
    this.#opened.set(id, stream);
    return stream;
  }

  /** The stream the other side opened as `id` (named in its call), with the directions it opened it for, seen from here. */
  acceptStream(id: unknown, directions: { receives: boolean; sends: boolean }): LinkStream {
    if (this.#closed !== null) throw new LinkClosedError(this.#closed);
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 1 || id > 0x3fff_ffff) throw new Error('a stream id is an integer from 1 to 2^30-1');
    if (this.#accepted.has(id)) throw new Error(`stream ${id} is open already`);
    if (this.#accepted.size >= MAX_STREAMS) throw new Error(`more than ${MAX_STREAMS} streams are open`);
    const stream = new LinkStream(id, false, directions, this.#wire);
    this.#accepted.set(id, stream);
    stream.grantWindow();
    const early = this.#early.get(id);
    this.#early.delete(id);
    for (const message of early ?? []) if (!stream.receiveControl(message)) this.close(`a stream message that breaks its stream's rules (${message.t})`);
    return stream;
  }

  close(reason = 'closed'): void {
    if (this.#closed !== null) return;
    this.#closed = reason;
    this.socket.destroy();
    for (const pending of this.#pending.values()) pending.reject(new LinkClosedError(reason));
    this.#pending.clear();
    this.#buffered = [];
    const streams = [...this.#opened.values(), ...this.#accepted.values()];
    this.#opened.clear();
    this.#accepted.clear();
    for (const stream of streams) stream.linkClosed(new LinkClosedError(reason));
    for (const listener of this.#closeListeners.splice(0)) listener(reason);
  }

  #send(message: Message): void {
    const body = Buffer.from(JSON.stringify(message));
    if (body.length > MAX_FRAME_BYTES) throw new Error(`a ${body.length}-byte message is over the link's ${MAX_FRAME_BYTES}-byte frame`);
    const head = Buffer.alloc(4);
    head.writeUInt32BE(body.length);
    this.socket.write(Buffer.concat([head, body]));
  }

  #receive(chunk: Buffer): void {
    this.#buffered.push(chunk);
    this.#bufferedBytes += chunk.length;
    while (this.#closed === null) {
      if (this.#frameLength === null) {
        if (this.#bufferedBytes < 4) return;
        const word = this.#take(4).readUInt32BE(0);
        this.#frameIsData = (word & DATA_FRAME) !== 0;
        const length = this.#frameIsData ? word - DATA_FRAME : word;
        if (this.#frameIsData ? length < DATA_HEAD_BYTES || length > DATA_HEAD_BYTES + MAX_META_BYTES + MAX_DATA_FRAME_BYTES : length > MAX_FRAME_BYTES) {
          return this.close(`a ${this.#frameIsData ? 'data ' : ''}frame of ${length} bytes is over the link's limit`);
        }
        this.#frameLength = length;
      }
      // A frame's bytes are joined once, when all of them are here: linear however they were cut.
      if (this.#bufferedBytes < this.#frameLength) return;
      const body = this.#take(this.#frameLength);
      this.#frameLength = null;
      if (this.#frameIsData) {
        this.#receiveData(body);
        continue;
      }
      let message: Message;
      try {
        message = JSON.parse(body.toString('utf8')) as Message;
      } catch {
        return this.close('a frame that is not JSON');
      }
      this.#dispatch(message);
    }
  }

  /** The first `n` buffered bytes, taken off the buffer. */
  #take(n: number): Buffer {
    const parts: Buffer[] = [];
    let missing = n;
    while (missing > 0) {
      const first = this.#buffered[0]!;
      if (first.length <= missing) {
        parts.push(first);
        this.#buffered.shift();
        missing -= first.length;
      } else {
        parts.push(first.subarray(0, missing));
        this.#buffered[0] = first.subarray(missing);
        missing = 0;
      }
    }
    this.#bufferedBytes -= n;
    return parts.length === 1 ? parts[0]! : Buffer.concat(parts, n);
  }

  #wireId(stream: LinkStream): number {
    return stream.id * 2 + (stream.mine ? 0 : 1);
  }

  /** The stream a frame names: one the sender opened (an even id) is one this side accepted. */
  #streamOf(wireId: unknown): LinkStream | undefined {
    if (typeof wireId !== 'number' || !Number.isInteger(wireId)) return undefined;
    return (wireId % 2 === 0 ? this.#accepted : this.#opened).get(Math.floor(wireId / 2));
  }

  /** An end, failure or cancel for a stream the other side opened and this side has not accepted (yet). */
  #keepEarly(message: StreamControl): void {
    if (message.t === 'credit' || !Number.isInteger(message.s) || message.s % 2 !== 0) return;
    const id = Math.floor(message.s / 2);
    const kept = this.#early.get(id) ?? [];
    if (kept.length >= 2) return;
    kept.push(message);
    this.#early.delete(id);
    this.#early.set(id, kept);
    if (this.#early.size > MAX_STREAMS) this.#early.delete(this.#early.keys().next().value!);
  }

  #receiveData(body: Buffer): void {
    const metaLength = body.readUInt16BE(4);
    if (metaLength > MAX_META_BYTES || DATA_HEAD_BYTES + metaLength > body.length) return this.close('a data frame whose meta does not fit it');
    const stream = this.#streamOf(body.readUInt32BE(0));
    if (stream === undefined) return; // a stream that ended here: what was in flight is dropped
    let meta: unknown;
    try {
      meta = metaLength === 0 ? undefined : JSON.parse(body.toString('utf8', DATA_HEAD_BYTES, DATA_HEAD_BYTES + metaLength));
    } catch {
      return this.close("a chunk's meta that is not JSON");
    }
    const data = body.subarray(DATA_HEAD_BYTES + metaLength);
    if (!stream.receiveData(meta, data, metaLength + data.length)) this.close(`stream ${stream.id} was sent more than its credit`);
  }

  #dispatch(message: Message): void {
    if (typeof message !== 'object' || message === null) return this.close('a message that is not an object');
    if (message.t === 'reply') {
      const pending = this.#pending.get(message.id);
      if (pending === undefined) return;
      this.#pending.delete(message.id);
      if (message.ok) pending.resolve(message.value);
      else pending.reject(new LinkError(String(message.error), message.detail ?? null));
      return;
    }
    if (message.t === 'credit' || message.t === 'end' || message.t === 'fail' || message.t === 'cancel') {
      const stream = this.#streamOf(message.s);
      if (stream === undefined) return this.#keepEarly(message);
      if (!stream.receiveControl(message)) this.close(`a stream message that breaks its stream's rules (${message.t})`);
      return;
    }
    const handler = typeof message.method === 'string' ? this.#handlers.get(message.method) : undefined;
    if (message.t === 'note') {
      if (handler !== undefined) void Promise.resolve().then(() => handler(message.args)).catch(() => undefined);
      return;
    }
    if (message.t !== 'call' || !Number.isSafeInteger(message.id)) return this.close('a message of no known kind');
    const id = message.id;
    if (handler === undefined) return this.#send({ t: 'reply', id, ok: false, error: `no method '${String(message.method).slice(0, 64)}'` });
    Promise.resolve()
      .then(() => handler(message.args))
      .then(
        (value) => this.#closed === null && this.#send({ t: 'reply', id, ok: true, value: value ?? null }),
        (err: unknown) =>
          this.#closed === null &&
          this.#send({ t: 'reply', id, ok: false, error: err instanceof Error ? err.message : String(err), ...(err instanceof LinkError ? { detail: err.detail } : {}) }),
      );
  }
}
