/**
 * The host's client for vessel-agent (docs/agent-protocol.md) over the Unix socket QEMU gives
 * the VM's agent port (or, in tests, any socket the agent's channel is joined to).
 *
 * - Connecting resynchronizes first: 0xFF filler, SYNC_MAGIC and a HELLO with a random nonce;
 *   every byte before the HELLO_ACK that echoes the nonce is stale and discarded (at most
 *   MAX_STALE_BYTES). There is no other state to recover: a new session starts with no streams,
 *   and processes are found again by id (listProcesses, attach).
 * - Requests are multiplexed on streams with ids from a counter; frames for an id we no longer
 *   know (a stream we cancelled, a timed-out request) are dropped, never thrown.
 * - Flow control: every stream the agent writes to has a window (DEFAULT_WINDOW unless asked),
 *   granted back as the consumer takes the bytes, so a stream holds at most its window here. A
 *   guest that sends beyond its credit breaks the protocol. Towards the agent, stdin and file
 *   data are sent only within the credit the agent granted.
 * - A malformed frame, a frame of a type a stream cannot carry, or credit overrun ends the
 *   channel: every pending call rejects and every stream fails, with the reason. Only this VM's
 *   channel is affected.
 * - Every reply is bounded in bytes, not only in frames (docs/agent-protocol.md, "Limits"): a
 *   one-shot reply by its count of frames of bounded size and an END of the size its request
 *   allows, a stream by its window, and what a call collects from a stream (a listing) by a byte
 *   budget of its own. A listing over its budget fails that call alone (AgentReplyTooLargeError)
 *   and its stream is cancelled; the channel goes on.
 */
import { randomBytes } from 'node:crypto';
import { createConnection, type Socket } from 'node:net';
import { constants as osConstants } from 'node:os';
import { Readable } from 'node:stream';
import { AgentProtocolError, FLAG_EOF, FrameDecoder, MAX_PAYLOAD, NONCE_BYTES, R, ResyncScanner, T, encodeFrame, resyncPreamble, retainable, type Frame } from './frames.js';
import {
  AgentError,
  AttachFlags,
  decodeDirEntries,
  decodeError,
  decodeHelloAck,
  decodeOutput,
  decodeProcInfo,
  decodeStat,
  decodeWindow,
  encodeAttach,
  guestDate,
  encodeIdentity,
  encodeSpawn,
  u32s,
  withPath,
  type AgentLimits,
  type DirEntry,
  type Output,
  type ProcessInfo,
  type SpawnRequest,
  type StatInfo,
} from './messages.js';

export { AgentError, AgentProtocolError, guestDate };
export type { AgentLimits, DirEntry, ProcessInfo, StatInfo };

/**
 * Bytes the handshake skips, at most, before the HELLO_ACK: the agent's output queue (its high
 * water mark plus one burst) and what QEMU and the socket buffered for an earlier client.
 */
const MAX_STALE_BYTES = 16 * 1024 * 1024;
/** Credit per stream unless a call asks otherwise: what one stream can make the host buffer. */
export const DEFAULT_WINDOW = 256 * 1024;
/** The smallest window a stream may ask for: a directory frame needs 279 bytes of credit. */
const MIN_WINDOW = 4096;
/**
 * PROC frames one LIST_PROCS may bring (the agent keeps 128); more is hostile. With a PROC's
 * size capped (68 + 256 bytes), a process list is at most 41.5 KiB.
 */
const MAX_LISTED_PROCS = 128;
const DEFAULT_MAX_DIR_ENTRIES = 100_000;
/**
 * What one listDir() may collect, counted as the agent sends it (24 bytes and the name per
 * entry) plus what the caller adds per entry. 100,000 entries of 143 bytes fit; a guest cannot
 * make one listing hold more (names are at most NAME_MAX bytes, the stream's window bounds what
 * waits beyond the budget).
 */
export const DEFAULT_MAX_LISTING_BYTES = 16 * 1024 * 1024;

const DEFAULT_TIMEOUT_MS = 30_000;
const EMPTY = Buffer.alloc(0);

export class AgentClosedError extends Error {
  override readonly name = 'AgentClosedError';
}

export class AgentTimeoutError extends Error {
  override readonly name = 'AgentTimeoutError';
}

/**
 * A reply larger than the call allows (more entries or more bytes than its budget): that call
 * fails and its stream is cancelled, the channel goes on. A RangeError, as the cap it replaces was.
 */
export class AgentReplyTooLargeError extends RangeError {
  override readonly name = 'AgentReplyTooLargeError';
  constructor(
    readonly what: string,
    readonly limit: number,
    readonly unit: 'entries' | 'bytes',
  ) {
    super(`${what} has more than ${limit} ${unit}`);
  }
}

interface Handler {
  frame(f: Frame): void;
  closed(err: Error): void;
}

/** What the stream objects below use of the client. */
interface Link {
  send(type: number, stream: number, payload?: Buffer, flags?: number): boolean;
  drain(): Promise<void>;
  /** Forgets the stream; with `cancel`, tells the agent to stop it too. */
  release(stream: number, cancel: boolean): void;
}

const protocol = (what: string) => new AgentProtocolError(what);
const typeName = (type: number) => `0x${type.toString(16)}`;

/** A FIFO without Array#shift's linear cost. */
class Queue<V> {
  #items: V[] = [];
  #head = 0;
  push(v: V): void {
    this.#items.push(v);
  }
  shift(): V | undefined {
    if (this.#head >= this.#items.length) return undefined;
    const v = this.#items[this.#head++];
    if (this.#head > 1024 && this.#head * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#head);
      this.#head = 0;
    }
    return v;
  }
}

/**
 * What the agent sent on one flow-controlled stream, held until the consumer takes it. Credit
 * returns as items are taken (in batches of half the window), so at most `window` bytes wait.
 */
class Inbox<V> implements AsyncIterator<V> {
  readonly #items = new Queue<{ value: V; bytes: number }>();
  #credit: number;
  #taken = 0;
  #end: { error?: Error } | null = null;
  #wake: (() => void) | null = null;

  constructor(
    private readonly window: number,
    private readonly grant: (bytes: number) => void,
  ) {
    this.#credit = window;
  }

  push(value: V, bytes: number): void {
    if (this.#end !== null) return;
    if (bytes > this.#credit) throw protocol(`the agent sent ${bytes} bytes on a stream with ${this.#credit} bytes of credit`);
    this.#credit -= bytes;
    this.#items.push({ value, bytes });
    this.#wake?.();
  }

  finish(error?: Error): void {
    if (this.#end === null) this.#end = error === undefined ? {} : { error };
    this.#wake?.();
  }

  get finished(): boolean {
    return this.#end !== null;
  }

  async next(): Promise<IteratorResult<V>> {
    for (;;) {
      const head = this.#items.shift();
      if (head !== undefined) {
        this.#taken += head.bytes;
        if (this.#end === null && this.#taken >= this.window / 2) {
          this.#credit += this.#taken;
          this.grant(this.#taken);
          this.#taken = 0;
        }
        return { value: head.value, done: false };
      }
      if (this.#end !== null) {
        if (this.#end.error !== undefined) throw this.#end.error;
        return { value: undefined, done: true };
      }
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = null;
    }
  }
}

/** A promise whose rejection nobody has to observe (callers may only care about another one). */
function settled<V>(): { promise: Promise<V>; resolve: (v: V) => void; reject: (e: Error) => void; done: boolean } {
  let resolve!: (v: V) => void, reject!: (e: Error) => void;
  const promise = new Promise<V>((res, rej) => ((resolve = res), (reject = rej)));
  promise.catch(() => undefined);
  const s = {
    promise,
    done: false,
    resolve: (v: V) => {
      if (!s.done) {
        s.done = true;
        resolve(v);
      }
    },
    reject: (e: Error) => {
      if (!s.done) {
        s.done = true;
        reject(e);
      }
    },
  };
  return s;
}

function windowOf(requested: number | undefined): number {
  const w = requested ?? DEFAULT_WINDOW;
  if (!Number.isInteger(w) || w < MIN_WINDOW || w > 0xffffffff) throw new RangeError(`a window is ${MIN_WINDOW} to 2^32-1 bytes`);
  return w;
}

export interface OutputChunk extends Output {
  /** Bytes of this channel that the ring dropped before this chunk reached us (0n: none). */
  lost: bigint;
}

/**
 * A process's stream: SPAWN, or ATTACH to one the agent keeps. Iterate it for the output as it
 * comes (iterating is what grants the agent credit); `done` resolves with the final state when
 * the process has exited and all its output was delivered (null if the stream ended first).
 */
export class AgentProcess implements AsyncIterable<OutputChunk> {
  readonly #info = settled<ProcessInfo>();
  readonly #done = settled<ProcessInfo | null>();
  readonly #inbox: Inbox<OutputChunk>;
  #stdinCredit = 0;
  #stdinWake: (() => void) | null = null;
  #failure: Error | null = null;
  /** The next offset of each channel: pass to attach() to resume with no gap and no duplicate. */
  readonly next = { stdout: 0n, stderr: 0n };
  /**
   * Where this stream's first byte of each channel is, fixed once the process is described.
   * `next` runs ahead of what the reader took (frames wait in the inbox), so a reader's own
   * position is this plus what it has taken.
   */
  readonly start = { stdout: 0n, stderr: 0n };

  /** @internal */
  constructor(
    private readonly link: Link,
    readonly stream: number,
    window: number,
    private readonly startAt: 'given' | 'oldest' | 'end',
  ) {
    this.#inbox = new Inbox(window, (n) => this.link.send(T.WINDOW, stream, u32s(n)));
  }

  /** The process as it was when the stream began (PROC); rejects if it could not start. */
  get info(): Promise<ProcessInfo> {
    return this.#info.promise;
  }

  get done(): Promise<ProcessInfo | null> {
    return this.#done.promise;
  }

  /** Leaving the loop early (break, throw) detaches the stream, as cancel() does. */
  [Symbol.asyncIterator](): AsyncIterator<OutputChunk> {
    return {
      next: () => this.#inbox.next(),
      return: async () => {
        if (!this.#inbox.finished) this.cancel();
        return { value: undefined, done: true };
      },
    };
  }

  /** Writes to the process's stdin (or its terminal) within the credit the agent grants. */
  async write(data: Buffer): Promise<void> {
    for (let at = 0; at < data.length; ) {
      while (this.#stdinCredit === 0) {
        if (this.#failure !== null) throw this.#failure;
        await new Promise<void>((resolve) => (this.#stdinWake = resolve));
      }
      if (this.#failure !== null) throw this.#failure;
      const n = Math.min(data.length - at, this.#stdinCredit, MAX_PAYLOAD);
      this.#stdinCredit -= n;
      if (!this.link.send(T.DATA, this.stream, data.subarray(at, at + n))) await this.link.drain();
      at += n;
    }
  }

  /** Closes stdin (ignored by a terminal: send 0x04 for ^D). */
  end(): void {
    if (this.#failure === null) this.link.send(T.DATA, this.stream, EMPTY, FLAG_EOF);
  }

  /** Stops this stream; the process runs on (its output goes to its ring). */
  cancel(): void {
    this.link.release(this.stream, true);
    this.#stop(new AgentClosedError('stream cancelled'), null);
  }

  /** @internal */
  handler(offsets: { stdout: bigint; stderr: bigint }): Handler {
    this.next.stdout = offsets.stdout;
    this.next.stderr = offsets.stderr;
    return {
      frame: (f) => this.#frame(f),
      closed: (err) => this.#stop(err, err),
    };
  }

  #frame(f: Frame): void {
    switch (f.type) {
      case R.PROC: {
        if (this.#info.done) throw protocol('a second PROC on a process stream');
        const info = decodeProcInfo(f.payload);
        if (this.startAt !== 'given') {
          const at = this.startAt === 'oldest' ? 'start' : 'end';
          this.next.stdout = info.stdout[at];
          this.next.stderr = info.stderr[at];
        }
        this.start.stdout = this.next.stdout;
        this.start.stderr = this.next.stderr;
        this.#info.resolve(info);
        return;
      }
      case R.WINDOW:
        this.#stdinCredit += decodeWindow(f.payload);
        this.#stdinWake?.();
        return;
      case R.OUTPUT: {
        if (!this.#info.done) throw protocol('OUTPUT before PROC');
        const out = decodeOutput(f.payload);
        const expected = this.next[out.channel];
        if (out.offset < expected) throw protocol(`${out.channel} offset ${out.offset} goes back from ${expected}`);
        this.next[out.channel] = out.offset + BigInt(out.data.length);
        this.#inbox.push({ ...out, data: retainable(out.data), lost: out.offset - expected }, out.data.length);
        return;
      }
      case R.EXIT:
        if (!this.#info.done) throw protocol('EXIT before PROC');
        this.link.release(this.stream, false);
        this.#stop(null, decodeProcInfo(f.payload));
        return;
      case R.END:
        if (!this.#info.done) throw protocol('END before PROC');
        this.link.release(this.stream, false);
        this.#stop(null, null);
        return;
      case R.ERROR: {
        const err = decodeError(f.payload);
        this.link.release(this.stream, false);
        this.#stop(err, err);
        return;
      }
      default:
        throw protocol(`frame type ${typeName(f.type)} on a process stream`);
    }
  }

  /** Ends the stream: `outputError` for the iterator, `result` (an error or the final state) for done. */
  #stop(outputError: Error | null, result: Error | ProcessInfo | null): void {
    this.#failure ??= outputError ?? new AgentClosedError('the stream has ended');
    this.#inbox.finish(outputError ?? undefined);
    this.#info.reject(result instanceof Error ? result : new AgentClosedError('the stream ended before the process was described'));
    if (result instanceof Error) this.#done.reject(result);
    else this.#done.resolve(result);
    this.#stdinWake?.();
  }
}

export type SpawnOptions = Omit<SpawnRequest, 'window'> & { window?: number };

export interface AttachOptions {
  /** Where to start: explicit offsets (see AgentProcess.next), the oldest retained byte, or now. */
  from: { stdout: bigint; stderr: bigint } | 'oldest' | 'end';
  /** Keep streaming until the process exits; otherwise stop at what exists now. */
  follow?: boolean;
  /** Take over the process's stdin. */
  input?: boolean;
  window?: number;
}

interface RequestOptions {
  timeoutMs?: number;
}

export class AgentClient {
  readonly #socket: Socket;
  readonly #handlers = new Map<number, Handler>();
  readonly #decoder = new FrameDecoder((f) => this.#onFrame(f));
  #scanner: ResyncScanner | null;
  readonly #nonce: Buffer;
  readonly #ready = settled<void>();
  #limits: AgentLimits | null = null;
  #nextId = 1;
  #closeError: Error | null = null;
  readonly #closeListeners: Array<(err: Error) => void> = [];
  readonly #link: Link = {
    send: (type, stream, payload, flags) => this.#send(type, stream, payload, flags),
    drain: () => this.#drain(),
    release: (stream, cancel) => {
      if (this.#handlers.delete(stream) && cancel && this.#closeError === null) this.#send(T.CANCEL, stream);
    },
  };

  private constructor(socket: Socket, connected: boolean) {
    this.#socket = socket;
    this.#nonce = randomBytes(NONCE_BYTES);
    this.#scanner = new ResyncScanner(this.#nonce, MAX_STALE_BYTES);
    if (connected) socket.write(resyncPreamble(this.#nonce));
    else socket.on('connect', () => socket.write(resyncPreamble(this.#nonce)));
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', (err) => this.#destroy(new AgentClosedError(`agent channel failed: ${err.message}`)));
    socket.on('close', () => this.#destroy(new AgentClosedError('agent channel closed')));
  }

  /** Connects to the socket at `path` and resynchronizes; rejects if no agent answers in time. */
  static connect(path: string, opts: { timeoutMs?: number } = {}): Promise<AgentClient> {
    return new AgentClient(createConnection(path), false).#handshake(path, opts.timeoutMs);
  }

  /** Resynchronizes over a socket already connected to the agent's channel. */
  static over(socket: Socket, opts: { timeoutMs?: number } = {}): Promise<AgentClient> {
    return new AgentClient(socket, true).#handshake('the socket', opts.timeoutMs);
  }

  async #handshake(where: string, timeoutMs = 5000): Promise<AgentClient> {
    const timer = setTimeout(() => this.#destroy(new AgentTimeoutError(`no agent answered on ${where} within ${timeoutMs} ms`)), timeoutMs);
    try {
      await this.#ready.promise;
    } finally {
      clearTimeout(timer);
    }
    return this;
  }

  /** What the agent said about itself in its HELLO_ACK. */
  get limits(): AgentLimits {
    return this.#limits!;
  }

  get closed(): boolean {
    return this.#closeError !== null;
  }

  onClose(listener: (err: Error) => void): void {
    if (this.#closeError !== null) listener(this.#closeError);
    else this.#closeListeners.push(listener);
  }

  /** Ends the channel; pending calls reject. The agent's processes run on. */
  close(): void {
    this.#destroy(new AgentClosedError('closed by the host'));
  }

  // ---- requests ----

  async ping(opts?: RequestOptions): Promise<void> {
    const data = randomBytes(8);
    const { end } = await this.#request(T.PING, data, opts, undefined, data.length);
    if (!end.equals(data)) throw protocol('PING answered with other bytes');
  }

  spawn(opts: SpawnOptions): AgentProcess {
    const window = windowOf(opts.window);
    const payload = encodeSpawn({ ...opts, window });
    return this.#processStream(T.SPAWN, payload, window, 'given', { stdout: 0n, stderr: 0n });
  }

  attach(id: number, opts: AttachOptions): AgentProcess {
    const window = windowOf(opts.window);
    const from = opts.from;
    const flags =
      (opts.follow ? AttachFlags.FOLLOW : 0) | (opts.input ? AttachFlags.INPUT : 0) | (from === 'oldest' ? AttachFlags.FROM_OLDEST : from === 'end' ? AttachFlags.FROM_END : 0);
    const offsets = typeof from === 'object' ? from : { stdout: 0n, stderr: 0n };
    return this.#processStream(T.ATTACH, encodeAttach(id, flags, window, offsets.stdout, offsets.stderr), window, typeof from === 'object' ? 'given' : from, offsets);
  }

  async signal(id: number, signal: number | NodeJS.Signals, opts: { tree?: boolean } & RequestOptions = {}): Promise<void> {
    const signo = typeof signal === 'number' ? signal : osConstants.signals[signal];
    await this.#request(T.SIGNAL, u32s(id, signo, opts.tree ? 1 : 0), opts);
  }

  async resize(id: number, rows: number, cols: number, opts?: RequestOptions): Promise<void> {
    const b = Buffer.alloc(8);
    b.writeUInt32LE(id, 0);
    b.writeUInt16LE(rows, 4);
    b.writeUInt16LE(cols, 6);
    await this.#request(T.RESIZE, b, opts);
  }

  async listProcesses(opts?: RequestOptions): Promise<ProcessInfo[]> {
    return (await this.#request(T.LIST_PROCS, EMPTY, opts, { type: R.PROC, max: MAX_LISTED_PROCS, decode: decodeProcInfo })).items;
  }

  /** Drops an exited process and its retained output. */
  async forget(id: number, opts?: RequestOptions): Promise<void> {
    await this.#request(T.FORGET, u32s(id), opts);
  }

  async stat(path: string, opts: { noFollow?: boolean } & RequestOptions = {}): Promise<StatInfo> {
    const { items } = await this.#request(T.STAT, withPath(u32s(opts.noFollow ? 1 : 0), path), opts, { type: R.STAT, max: 1, decode: decodeStat });
    if (items.length !== 1) throw protocol('STAT answered without a STAT frame');
    return items[0]!;
  }

  async mkdir(path: string, opts: { parents?: boolean; mode?: number } & RequestOptions = {}): Promise<void> {
    await this.#request(T.MKDIR, withPath(u32s(opts.parents ? 1 : 0, opts.mode ?? 0), path), opts);
  }

  async remove(path: string, opts: { recursive?: boolean } & RequestOptions = {}): Promise<void> {
    await this.#request(T.REMOVE, withPath(u32s(opts.recursive ? 1 : 0), path), opts);
  }

  /**
   * A fork's identity: `entropy` (1 to 256 bytes) is credited and the CRNG reseeded first, then
   * the clock is set (unless clockNs is 0n) and the hostname (unless empty).
   */
  async setIdentity(identity: { entropy: Buffer; clockNs?: bigint; hostname?: string }, opts?: RequestOptions): Promise<void> {
    await this.#request(T.IDENTITY, encodeIdentity(identity.clockNs ?? 0n, identity.hostname ?? '', identity.entropy), opts);
  }

  /** Asks the guest to power off (or reboot); it answers before it does. */
  async shutdown(opts: { reboot?: boolean } & RequestOptions = {}): Promise<void> {
    await this.#request(T.SHUTDOWN, u32s(opts.reboot ? 1 : 0), opts);
  }

  /**
   * Streams a regular file's bytes, from `offset`. Resolves once the agent opened it (so a
   * missing file or a directory rejects here, with its errno), with its stat and the bytes.
   */
  async readFile(path: string, opts: { offset?: bigint; window?: number } = {}): Promise<{ info: StatInfo; stream: Readable }> {
    if (this.#closeError !== null) throw this.#closedError();
    const window = windowOf(opts.window);
    const fixed = Buffer.alloc(16);
    fixed.writeUInt32LE(window, 0);
    fixed.writeBigUInt64LE(opts.offset ?? 0n, 8);
    const payload = withPath(fixed, path);
    const opened = settled<StatInfo>();
    let id = 0;
    const inbox = new Inbox<Buffer>(window, (n) => this.#send(T.WINDOW, id, u32s(n)));
    id = this.#open({
      frame: (f) => {
        if (f.type === R.STAT && !opened.done) opened.resolve(decodeStat(f.payload));
        else if (f.type === R.DATA && opened.done) inbox.push(retainable(f.payload), f.payload.length);
        else if (f.type === R.END && opened.done) this.#finishStream(id, inbox);
        else if (f.type === R.ERROR) this.#finishStream(id, inbox, decodeError(f.payload), opened.reject);
        else throw protocol(`frame type ${typeName(f.type)} on a file read`);
      },
      closed: (err) => {
        opened.reject(err);
        inbox.finish(err);
      },
    });
    this.#send(T.READ_FILE, id, payload);
    return { info: await opened.promise, stream: Readable.from(this.#drainInbox(id, inbox)) };
  }

  /**
   * Writes a file from raw bytes, within the agent's credit; resolves with its size once the
   * agent has fsync'd it and every directory above it.
   */
  async writeFile(path: string, data: Buffer | Iterable<Uint8Array> | AsyncIterable<Uint8Array>, opts: { mkdirs?: boolean; mode?: number } = {}): Promise<number> {
    const payload = withPath(u32s(opts.mkdirs ? 1 : 0, opts.mode ?? 0), path);
    if (this.#closeError !== null) throw this.#closedError();
    const result = settled<number>();
    let credit = 0;
    let wake: (() => void) | null = null;
    const id = this.#open({
      frame: (f) => {
        if (f.type === R.WINDOW) credit += decodeWindow(f.payload);
        else if (f.type === R.END) {
          if (f.payload.length !== 8) throw protocol('WRITE_FILE END without its size');
          this.#handlers.delete(id);
          result.resolve(Number(f.payload.readBigUInt64LE(0)));
        } else if (f.type === R.ERROR) {
          this.#handlers.delete(id);
          result.reject(decodeError(f.payload));
        } else throw protocol(`frame type ${typeName(f.type)} on a file write`);
        wake?.();
      },
      closed: (err) => {
        result.reject(err);
        wake?.();
      },
    });
    this.#send(T.WRITE_FILE, id, payload);
    try {
      const chunks = Buffer.isBuffer(data) ? [data] : data;
      for await (const chunk of chunks) {
        let rest = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
        while (rest.length > 0) {
          while (credit === 0 && !result.done) await new Promise<void>((resolve) => (wake = resolve));
          if (result.done) return await result.promise;
          const n = Math.min(rest.length, credit, MAX_PAYLOAD);
          credit -= n;
          const flowing = this.#send(T.DATA, id, rest.subarray(0, n));
          rest = rest.subarray(n);
          if (!flowing) await this.#drain();
        }
      }
      if (!result.done) this.#send(T.DATA, id, EMPTY, FLAG_EOF);
    } catch (err) {
      this.#link.release(id, true);
      throw err;
    }
    return await result.promise;
  }

  /**
   * A directory's entries (not . and ..): at most `maxEntries` of them, and at most `maxBytes`
   * counting DIRENT_FIXED_BYTES, the name and `entryBytes` (what the caller will add to each, a
   * path prefix) per entry. Past either, AgentReplyTooLargeError, and the agent is told to stop:
   * the host holds at most the budget plus the stream's window.
   */
  async listDir(path: string, opts: { maxEntries?: number; maxBytes?: number; entryBytes?: number; window?: number } = {}): Promise<DirEntry[]> {
    const window = windowOf(opts.window);
    const max = opts.maxEntries ?? DEFAULT_MAX_DIR_ENTRIES;
    const maxBytes = opts.maxBytes ?? DEFAULT_MAX_LISTING_BYTES;
    const perEntry = opts.entryBytes ?? 0;
    const payload = withPath(u32s(window), path);
    if (this.#closeError !== null) throw this.#closedError();
    let id = 0;
    // Each batch carries its frame's payload length: exactly DIRENT_FIXED_BYTES plus the name per entry.
    const inbox = new Inbox<{ entries: DirEntry[]; bytes: number }>(window, (n) => this.#send(T.WINDOW, id, u32s(n)));
    id = this.#open({
      frame: (f) => {
        if (f.type === R.DIR) inbox.push({ entries: decodeDirEntries(f.payload), bytes: f.payload.length }, f.payload.length);
        else if (f.type === R.END) this.#finishStream(id, inbox);
        else if (f.type === R.ERROR) this.#finishStream(id, inbox, decodeError(f.payload));
        else throw protocol(`frame type ${typeName(f.type)} on a directory listing`);
      },
      closed: (err) => inbox.finish(err),
    });
    this.#send(T.LIST_DIR, id, payload);
    const entries: DirEntry[] = [];
    let bytes = 0;
    // Leaving the loop by a throw cancels the stream (#drainInbox): nothing more is read for it.
    for await (const batch of this.#drainInbox(id, inbox)) {
      bytes += batch.bytes + batch.entries.length * perEntry;
      if (bytes > maxBytes) throw new AgentReplyTooLargeError(`'${path}'`, maxBytes, 'bytes');
      if (entries.length + batch.entries.length > max) throw new AgentReplyTooLargeError(`'${path}'`, max, 'entries');
      for (const e of batch.entries) entries.push(e);
    }
    return entries;
  }

  // ---- the channel ----

  #processStream(type: number, payload: Buffer, window: number, startAt: 'given' | 'oldest' | 'end', offsets: { stdout: bigint; stderr: bigint }): AgentProcess {
    const id = this.#open({ frame: (f) => handler.frame(f), closed: (err) => handler.closed(err) });
    const proc = new AgentProcess(this.#link, id, window, startAt);
    const handler = proc.handler(offsets);
    if (this.#closeError !== null) handler.closed(this.#closedError());
    else this.#send(type, id, payload);
    return proc;
  }

  async *#drainInbox<V>(id: number, inbox: Inbox<V>): AsyncGenerator<V> {
    try {
      for (;;) {
        const r = await inbox.next();
        if (r.done) return;
        yield r.value;
      }
    } finally {
      if (!inbox.finished) this.#link.release(id, true); // the consumer stopped early
    }
  }

  #finishStream<V>(id: number, inbox: Inbox<V>, err?: Error, reject?: (e: Error) => void): void {
    this.#handlers.delete(id);
    if (err !== undefined) reject?.(err);
    inbox.finish(err);
  }

  /**
   * A request answered by END (or ERROR), with up to `accept.max` frames of `accept.type` before
   * it, each decoded as it arrives (a bad one ends the channel at once), and an END payload of at
   * most `maxEnd` bytes (only PING's END carries any). So a reply is bounded in bytes by its
   * frames' count and their sizes, and no guest can make the host keep a 64 KiB END it never reads.
   */
  #request<V = never>(
    type: number,
    payload: Buffer,
    opts?: RequestOptions,
    accept?: { type: number; max: number; decode: (p: Buffer) => V },
    maxEnd = 0,
  ): Promise<{ items: V[]; end: Buffer }> {
    if (this.#closeError !== null) return Promise.reject(this.#closedError());
    const reply = settled<{ items: V[]; end: Buffer }>();
    const items: V[] = [];
    const timeoutMs = opts?.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const id = this.#open({
      frame: (f) => {
        if (f.type === R.END) {
          if (f.payload.length > maxEnd) throw protocol(`an END of ${f.payload.length} bytes answering request ${typeName(type)}, which allows ${maxEnd}`);
          this.#handlers.delete(id);
          reply.resolve({ items, end: f.payload.length === 0 ? EMPTY : Buffer.from(f.payload) });
        } else if (f.type === R.ERROR) {
          this.#handlers.delete(id);
          reply.reject(decodeError(f.payload));
        } else if (accept !== undefined && f.type === accept.type && items.length < accept.max) {
          items.push(accept.decode(f.payload));
        } else {
          throw protocol(`frame type ${typeName(f.type)} (number ${items.length + 1}) answering request ${typeName(type)}`);
        }
      },
      closed: (err) => reply.reject(err),
    });
    const timer = setTimeout(() => {
      this.#link.release(id, true);
      reply.reject(new AgentTimeoutError(`request ${typeName(type)} had no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    this.#send(type, id, payload);
    return reply.promise.finally(() => clearTimeout(timer));
  }

  /** What a call made after the end gets: AgentClosedError, naming why the channel ended. */
  #closedError(): Error {
    const err = this.#closeError!;
    return err instanceof AgentClosedError ? err : new AgentClosedError(`the agent channel has ended: ${err.message}`, { cause: err });
  }

  #open(handler: Handler): number {
    let id = this.#nextId;
    while (this.#handlers.has(id)) id = id >= 0xffffffff ? 1 : id + 1;
    this.#nextId = id >= 0xffffffff ? 1 : id + 1;
    if (this.#closeError === null) this.#handlers.set(id, handler);
    return id;
  }

  #send(type: number, stream: number, payload?: Buffer, flags = 0): boolean {
    if (this.#closeError !== null) return true;
    return this.#socket.write(encodeFrame(type, stream, payload, flags));
  }

  #drain(): Promise<void> {
    if (this.#closeError !== null || this.#socket.writableLength === 0) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.#socket.off('drain', done);
        this.#socket.off('close', done);
        resolve();
      };
      this.#socket.on('drain', done);
      this.#socket.on('close', done);
    });
  }

  #onData(chunk: Buffer): void {
    try {
      if (this.#scanner !== null) {
        const rest = this.#scanner.push(chunk);
        if (rest === null) return;
        this.#scanner = null;
        chunk = rest;
      }
      this.#decoder.push(chunk);
    } catch (err) {
      this.#destroy(err instanceof Error ? err : new Error(String(err)));
    }
  }

  #onFrame(f: Frame): void {
    if (this.#limits === null) {
      if (f.type !== R.HELLO_ACK || f.stream !== 0) throw protocol(`frame type ${typeName(f.type)} before HELLO_ACK`);
      this.#limits = decodeHelloAck(f.payload, this.#nonce);
      this.#ready.resolve();
      return;
    }
    if (f.stream === 0) {
      if (f.type === R.ERROR) throw protocol(`the agent reports a protocol error: ${decodeError(f.payload).detail}`);
      throw protocol(`frame type ${typeName(f.type)} on stream 0`);
    }
    this.#handlers.get(f.stream)?.frame(f); // an unknown stream: one we ended; dropped
  }

  #destroy(err: Error): void {
    if (this.#closeError !== null) return;
    this.#closeError = err;
    this.#socket.destroy();
    this.#ready.reject(err);
    const handlers = [...this.#handlers.values()];
    this.#handlers.clear();
    for (const h of handlers) h.closed(err);
    for (const l of this.#closeListeners.splice(0)) l(err);
  }
}
