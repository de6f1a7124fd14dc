/**
 * A byte stream over a PartLink (part-link.ts), in either or both directions: chunks of bytes,
 * each with an optional small JSON `meta` (a process's channel and offset), then an end with a
 * value or a failure. Flow control is by credit: a side may send only as many bytes (meta
 * included) as the receiver granted, and the receiver grants them back as its consumer takes
 * chunks, so neither side ever holds more than STREAM_WINDOW of a stream. A peer that sends past
 * its credit breaks the link (the link closes); one that sends on a stream we no longer read is
 * ignored. Cancelling tells the sender to stop; the sender's writes then fail.
 */

/** Bytes a stream's receiver holds at most, and grants a new stream's sender from the start. */
export const STREAM_WINDOW = 256 * 1024;
/** The largest data frame a sender cuts; a receiver refuses larger ones from the header. */
export const MAX_DATA_FRAME_BYTES = STREAM_WINDOW + 4096;
/** A chunk's meta, as JSON: a few numbers and a name, never data. */
export const MAX_META_BYTES = 1024;

export class StreamClosedError extends Error {
  override readonly name = 'StreamClosedError';
}

/** What a stream needs of its link. */
export interface StreamWire {
  data(stream: LinkStream, meta: Buffer, data: Buffer): void;
  control(stream: LinkStream, message: { t: 'credit'; n: number } | { t: 'end'; value: unknown } | { t: 'fail'; error: { message: string; detail: unknown } } | { t: 'cancel' }): void;
  /** The stream is done both ways: the link forgets it. */
  forget(stream: LinkStream): void;
}

export interface StreamChunk {
  meta: unknown;
  data: Buffer;
}

/** An error whose `detail` crosses the link with its message (the other side gets a LinkError with both). */
export class LinkError extends Error {
  override readonly name = 'LinkError';
  constructor(
    message: string,
    readonly detail: unknown,
  ) {
    super(message);
  }
}

const EMPTY = Buffer.alloc(0);

export class LinkStream implements AsyncIterable<StreamChunk> {
  // receiving
  readonly #inbox: Array<{ chunk: StreamChunk; bytes: number }> = [];
  #inboxHead = 0;
  /**
   * Bytes the peer may still send. The opener grants its window at once (it knows the stream
   * before the call that names it goes out); the acceptor grants its own when it accepts, so
   * nothing arrives for a stream the acceptor does not know yet.
   */
  #credit: number;
  /** Bytes taken by the consumer and not yet granted back. */
  #taken = 0;
  #received: { value: unknown } | { error: Error } | null = null;
  #receiveDone: boolean;
  #wakeReader: (() => void) | null = null;
  readonly #result: Promise<unknown>;
  #settle!: { resolve(v: unknown): void; reject(e: Error): void };
  // sending
  #sendCredit: number;
  #sendDone: boolean;
  #sendError: Error | null = null;
  #wakeWriter: (() => void) | null = null;
  #peerCancelled = false;
  readonly #cancelListeners: Array<() => void> = [];

  /** @internal: made by PartLink.openStream / acceptStream. */
  constructor(
    readonly id: number,
    /** Whether this side opened it (its id is this side's). */
    readonly mine: boolean,
    directions: { receives: boolean; sends: boolean },
    private readonly wire: StreamWire,
  ) {
    this.#receiveDone = !directions.receives;
    this.#sendDone = !directions.sends;
    this.#credit = mine ? STREAM_WINDOW : 0;
    this.#sendCredit = mine ? 0 : STREAM_WINDOW;
    this.#result = new Promise((resolve, reject) => (this.#settle = { resolve, reject }));
    this.#result.catch(() => undefined);
    if (!directions.receives) this.#settle.resolve(undefined);
  }

  /** The sender's end value once every chunk before it has been received; its failure as a LinkError. */
  get result(): Promise<unknown> {
    return this.#result;
  }

  /** Called when the peer stops reading (writes fail from then on). */
  onCancel(listener: () => void): void {
    if (this.#peerCancelled) listener();
    else this.#cancelListeners.push(listener);
  }

  // ---- sending ----

  /**
   * Sends `data` within the peer's credit. A chunk with `meta` is one frame (it waits for credit
   * for all of it, and must fit the window), so the receiver gets it whole, as sent; bytes with
   * no meta are cut to frames as credit comes. One write at a time: the next waits for this one.
   */
  async write(data: Buffer, meta?: unknown): Promise<void> {
    if (meta !== undefined) {
      const metaBytes = Buffer.from(JSON.stringify(meta));
      if (metaBytes.length > MAX_META_BYTES) throw new RangeError(`a chunk's meta of ${metaBytes.length} bytes is over ${MAX_META_BYTES}`);
      if (metaBytes.length + data.length > STREAM_WINDOW) throw new RangeError(`a chunk with meta of ${metaBytes.length + data.length} bytes is over the window`);
      await this.#credited(metaBytes.length + data.length);
      this.#sendCredit -= metaBytes.length + data.length;
      this.wire.data(this, metaBytes, data);
      return;
    }
    for (let rest = data; rest.length > 0; ) {
      await this.#credited(1);
      const n = Math.min(rest.length, this.#sendCredit);
      this.#sendCredit -= n;
      this.wire.data(this, EMPTY, rest.subarray(0, n));
      rest = rest.subarray(n);
    }
  }

  /** Waits until `bytes` of credit are there; throws once this side may send no more. */
  async #credited(bytes: number): Promise<void> {
    while (this.#sendCredit < bytes && !this.#sendDone) await new Promise<void>((resolve) => (this.#wakeWriter = resolve));
    if (this.#sendDone) throw this.#sendError ?? new StreamClosedError('the stream was ended');
  }

  /** Ends this side's sending with `value`, which the peer's `result` resolves with. */
  end(value: unknown = null): void {
    if (this.#sendDone) return;
    this.wire.control(this, { t: 'end', value });
    this.#finishSending(new StreamClosedError('the stream was ended'));
  }

  /** Ends this side's sending with a failure (a LinkError's detail goes with it). */
  fail(error: Error): void {
    if (this.#sendDone) return;
    this.wire.control(this, { t: 'fail', error: { message: error.message, detail: error instanceof LinkError ? error.detail : null } });
    this.#finishSending(new StreamClosedError('the stream failed'));
  }

  // ---- receiving ----

  /** Stops receiving: the peer is told to stop, what waits here is dropped, `result` resolves with undefined. */
  cancel(): void {
    if (this.#receiveDone) return;
    this.wire.control(this, { t: 'cancel' });
    this.#finishReceiving({ value: undefined });
  }

  /** Ends both directions, as far as they are not ended already. */
  close(): void {
    this.cancel();
    this.end();
  }

  [Symbol.asyncIterator](): AsyncIterator<StreamChunk> {
    return {
      next: () => this.#next(),
      return: () => {
        this.cancel();
        return Promise.resolve({ value: undefined, done: true });
      },
    };
  }

  async #next(): Promise<IteratorResult<StreamChunk>> {
    for (;;) {
      if (this.#inboxHead < this.#inbox.length) {
        const { chunk, bytes } = this.#inbox[this.#inboxHead]!;
        this.#inbox[this.#inboxHead++] = undefined as never;
        if (this.#inboxHead === this.#inbox.length) {
          this.#inbox.length = 0;
          this.#inboxHead = 0;
        }
        this.#taken += bytes;
        if (!this.#receiveDone && this.#taken >= STREAM_WINDOW / 2) {
          this.#credit += this.#taken;
          this.wire.control(this, { t: 'credit', n: this.#taken });
          this.#taken = 0;
        }
        return { value: chunk, done: false };
      }
      if (this.#received !== null) {
        if ('error' in this.#received) throw this.#received.error;
        return { value: undefined, done: true };
      }
      if (this.#receiveDone) return { value: undefined, done: true };
      await new Promise<void>((resolve) => (this.#wakeReader = resolve));
      this.#wakeReader = null;
    }
  }

  // ---- from the link ----

  /** @internal The acceptor's first grant, once it knows the stream. */
  grantWindow(): void {
    if (this.#receiveDone || this.mine) return;
    this.#credit = STREAM_WINDOW;
    this.wire.control(this, { t: 'credit', n: STREAM_WINDOW });
  }

  /** @internal A data frame; false when it is over the credit granted (the link then closes). */
  receiveData(meta: unknown, data: Buffer, bytes: number): boolean {
    if (this.#receiveDone || this.#received !== null) return true; // cancelled: what was in flight is dropped
    if (bytes > this.#credit) return false;
    this.#credit -= bytes;
    this.#inbox.push({ chunk: { meta, data }, bytes });
    this.#wakeReader?.();
    return true;
  }

  /** @internal */
  receiveControl(message: { t: string; n?: unknown; value?: unknown; error?: unknown }): boolean {
    switch (message.t) {
      case 'credit': {
        const n = message.n;
        if (typeof n !== 'number' || !Number.isSafeInteger(n) || n <= 0 || n > STREAM_WINDOW) return false;
        if (this.#sendDone) return true;
        this.#sendCredit += n;
        if (this.#sendCredit > STREAM_WINDOW) return false;
        this.#wakeWriter?.();
        return true;
      }
      case 'end':
        if (this.#received === null && !this.#receiveDone) this.#received = { value: message.value };
        this.#settleReceived();
        return true;
      case 'fail': {
        const e = (typeof message.error === 'object' && message.error !== null ? message.error : {}) as { message?: unknown; detail?: unknown };
        if (this.#received === null && !this.#receiveDone) this.#received = { error: new LinkError(String(e.message).slice(0, 4096), e.detail ?? null) };
        this.#settleReceived();
        return true;
      }
      case 'cancel':
        this.#peerCancelled = true;
        this.#finishSending(new StreamClosedError('the other side stopped reading'));
        for (const l of this.#cancelListeners.splice(0)) l();
        return true;
      default:
        return false;
    }
  }

  /** @internal The link closed: everything waiting fails with `err`. */
  linkClosed(err: Error): void {
    if (this.#received === null && !this.#receiveDone) this.#received = { error: err };
    this.#settleReceived();
    this.#finishSending(err);
    this.#peerCancelled = true;
    for (const l of this.#cancelListeners.splice(0)) l();
  }

  /** An end or failure was received: the consumer gets it after what waits; the stream is done receiving. */
  #settleReceived(): void {
    const received = this.#received;
    if (received !== null) {
      if ('error' in received) this.#settle.reject(received.error);
      else this.#settle.resolve(received.value);
    }
    this.#receiveDone = true;
    this.#wakeReader?.();
    this.#forgetWhenDone();
  }

  #finishReceiving(outcome: { value: unknown }): void {
    this.#receiveDone = true;
    this.#inbox.length = 0;
    this.#inboxHead = 0;
    this.#settle.resolve(outcome.value);
    this.#wakeReader?.();
    this.#forgetWhenDone();
  }

  #finishSending(err: Error): void {
    if (!this.#sendDone) {
      this.#sendDone = true;
      this.#sendError = err;
    }
    this.#wakeWriter?.();
    this.#forgetWhenDone();
  }

  #forgetWhenDone(): void {
    if (this.#receiveDone && this.#sendDone) this.wire.forget(this);
  }
}
