/**
 * The channel between the service and one of its parts (a child process of its own, docs/security.md
 * "Processes"): requests with replies, and notifications, as JSON in length-prefixed frames over a
 * socket pair.
 *
 * Node's own IPC channel is not used: it buffers a message of any size before it parses it, and a
 * part is less trusted than the service (it parses what guests send). Here a frame's length is read
 * first and one above MAX_FRAME_BYTES ends the link, so a part that lost its mind costs its link,
 * never the service's memory. Each side names the methods it answers; a call of any other is refused.
 */
import type { Duplex } from 'node:stream';

/** A frame holds one JSON message: the largest is a gateway's restore of every attached runtime's rules. */
export const MAX_FRAME_BYTES = 16 * 1024 * 1024;
/** Calls the other side has not answered yet; past this a part is flooding, not working. */
const MAX_PENDING_CALLS = 10_000;

type Message =
  | { t: 'call'; id: number; method: string; args: unknown }
  | { t: 'reply'; id: number; ok: true; value: unknown }
  | { t: 'reply'; id: number; ok: false; error: string }
  | { t: 'note'; method: string; args: unknown };

export type Handler = (args: unknown) => unknown;

export class LinkClosedError extends Error {}

export class PartLink {
  readonly #pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  readonly #handlers = new Map<string, Handler>();
  readonly #closeListeners: Array<(reason: string) => void> = [];
  #nextId = 1;
  #buffered: Buffer[] = [];
  #bufferedBytes = 0;
  /** The length of the frame being read, once its header is in. */
  #frameLength: number | null = null;
  #closed: string | null = null;

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

  close(reason = 'closed'): void {
    if (this.#closed !== null) return;
    this.#closed = reason;
    this.socket.destroy();
    for (const pending of this.#pending.values()) pending.reject(new LinkClosedError(reason));
    this.#pending.clear();
    this.#buffered = [];
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
        const length = this.#take(4).readUInt32BE(0);
        if (length > MAX_FRAME_BYTES) return this.close(`a frame of ${length} bytes is over the link's limit`);
        this.#frameLength = length;
      }
      // A frame's bytes are joined once, when all of them are here: linear however they were cut.
      if (this.#bufferedBytes < this.#frameLength) return;
      const body = this.#take(this.#frameLength);
      this.#frameLength = null;
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

  #dispatch(message: Message): void {
    if (typeof message !== 'object' || message === null) return this.close('a message that is not an object');
    if (message.t === 'reply') {
      const pending = this.#pending.get(message.id);
      if (pending === undefined) return;
      this.#pending.delete(message.id);
      if (message.ok) pending.resolve(message.value);
      else pending.reject(new Error(String(message.error)));
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
        (err: unknown) => this.#closed === null && this.#send({ t: 'reply', id, ok: false, error: err instanceof Error ? err.message : String(err) }),
      );
  }
}
