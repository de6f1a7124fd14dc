/**
 * A qemu-guest-agent client. The agent sends no greeting and answers strictly in order, so the
 * client first resynchronizes (0xFF, then guest-sync-delimited with a random id, skipping stale
 * output up to the agent's 0xFF marker), then matches replies to requests first in, first out.
 * A timed-out request leaves the order unknown, so the connection is dropped and the next
 * caller reconnects.
 */
import { randomInt } from 'node:crypto';
import { JsonStream } from './json-stream.js';
import { withTimeout } from './qmp-client.js';

export class GuestAgentError extends Error {
  constructor(
    readonly command: string,
    readonly desc: string,
  ) {
    super(`${command}: ${desc}`);
  }
}

type Pending = { command: string; maxReplyBytes: number; resolve: (v: unknown) => void; reject: (e: Error) => void };

/** qemu-ga keeps at most this much of each output stream of a guest-exec (GUEST_EXEC_MAX_OUTPUT). */
const QGA_EXEC_MAX_OUTPUT = 16 * 1024 * 1024;
/** Room for the JSON around a reply's payload. */
const REPLY_ENVELOPE_BYTES = 64 * 1024;
const base64Bytes = (n: number): number => 4 * Math.ceil(n / 3);

/**
 * The longest reply a request can legitimately get: its payload in base64 plus the envelope.
 * Anything longer comes from a broken or hostile agent and ends the connection.
 */
export function maxReplyBytes(command: string, args?: Record<string, unknown>): number {
  switch (command) {
    case 'guest-exec-status':
      return 2 * base64Bytes(QGA_EXEC_MAX_OUTPUT) + REPLY_ENVELOPE_BYTES;
    case 'guest-file-read':
      return base64Bytes(typeof args?.count === 'number' ? args.count : 0) + REPLY_ENVELOPE_BYTES;
    default:
      return REPLY_ENVELOPE_BYTES;
  }
}

export class GuestAgentClient {
  readonly #queue: Pending[] = [];
  #stream!: JsonStream;
  #syncId = -1;
  #synced!: () => void;

  private constructor() {}

  /** Connects and synchronizes; rejects if the agent does not answer within `timeoutMs`. */
  static async connect(path: string, timeoutMs: number): Promise<GuestAgentClient> {
    const client = new GuestAgentClient();
    client.#stream = await JsonStream.connect(path, (msg) => client.#onMessage(msg), { maxLineBytes: () => client.#queue[0]?.maxReplyBytes ?? REPLY_ENVELOPE_BYTES }, timeoutMs);
    client.#stream.onClose((err) => client.#failAll(new Error(err === undefined ? 'guest agent connection closed' : `guest agent connection closed: ${err.message}`)));
    try {
      const synced = new Promise<void>((resolve) => (client.#synced = resolve));
      client.#syncId = randomInt(1, 2 ** 31);
      client.#stream.discardUntilSentinel();
      client.#stream.sendRaw(Buffer.from([0xff]));
      client.#stream.send({ execute: 'guest-sync-delimited', arguments: { id: client.#syncId } });
      await withTimeout(synced, timeoutMs, 'guest agent sync');
    } catch (err) {
      client.close();
      throw err;
    }
    return client;
  }

  get closed(): boolean {
    return this.#stream.closed;
  }

  call<T = unknown>(command: string, args?: Record<string, unknown>, timeoutMs = 30_000): Promise<T> {
    if (this.#stream.closed) return Promise.reject(new Error('guest agent connection closed'));
    const reply = new Promise<T>((resolve, reject) => {
      this.#queue.push({ command, maxReplyBytes: maxReplyBytes(command, args), resolve: resolve as (v: unknown) => void, reject });
    });
    this.#stream.send(args === undefined ? { execute: command } : { execute: command, arguments: args });
    return withTimeout(reply, timeoutMs, `guest agent ${command}`).catch((err: Error) => {
      if (!(err instanceof GuestAgentError)) this.close();
      throw err;
    });
  }

  /** For commands that never answer on success (guest-shutdown). */
  notify(command: string, args?: Record<string, unknown>): void {
    this.#stream.send(args === undefined ? { execute: command } : { execute: command, arguments: args });
  }

  close(): void {
    this.#stream.close();
  }

  #onMessage(msg: Record<string, unknown>): void {
    if (this.#syncId >= 0) {
      // Replies to stale syncs from earlier connections are skipped until ours arrives.
      if (msg.return === this.#syncId) {
        this.#syncId = -1;
        this.#synced();
      }
      return;
    }
    const p = this.#queue.shift();
    if (p === undefined) return;
    if ('error' in msg) {
      const e = msg.error as { desc?: string };
      p.reject(new GuestAgentError(p.command, e.desc ?? 'error'));
    } else {
      p.resolve(msg.return);
    }
  }

  #failAll(err: Error): void {
    for (const p of this.#queue.splice(0)) p.reject(err);
  }
}
