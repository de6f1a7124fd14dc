/**
 * A scripted vessel-agent for tests of what the host does with a hostile guest: it speaks the
 * real frame format (frames.ts's encoder and decoder), answers the resync handshake, keeps the
 * credit the host grants per stream as a real agent must (or the host ends the channel at once),
 * and counts every byte it manages to send, so a test can say how far the host let it get.
 * Connections are served one after another or side by side, as after the host's reconnects.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { join } from 'node:path';
import { AgentClient } from '../../src/vm/agent/agent-client.js';
import { FrameDecoder, HEADER_BYTES, R, SYNC_MAGIC, T, encodeFrame, type Frame } from '../../src/vm/agent/frames.js';
import { ErrorKind, PROC_INFO_BYTES, STAT_BYTES } from '../../src/vm/agent/messages.js';

/** One host connection, past its handshake. */
export class FakeConnection {
  /** Bytes of frames written to the host on this connection. */
  sent = 0;
  readonly #credit = new Map<number, number>();
  readonly #cancelled = new Set<number>();
  #closed = false;
  #wake: Array<() => void> = [];

  constructor(readonly sock: Socket) {
    sock.on('close', () => {
      this.#closed = true;
      this.#notify();
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  /** Writes a frame as the agent does, waiting while the host does not read; false once the host is gone. */
  async write(frame: Buffer): Promise<boolean> {
    if (this.#closed) return false;
    this.sent += frame.length;
    if (!this.sock.write(frame)) await this.#drained();
    return !this.#closed;
  }

  /** The request's initial window on `stream`. */
  grant(stream: number, bytes: number): void {
    this.#credit.set(stream, (this.#credit.get(stream) ?? 0) + bytes);
    this.#notify();
  }

  /** Waits until `bytes` of credit are there and takes them; false if the stream was cancelled or the host left. */
  async spend(stream: number, bytes: number): Promise<boolean> {
    for (;;) {
      if (this.#closed || this.#cancelled.has(stream)) return false;
      const credit = this.#credit.get(stream) ?? 0;
      if (credit >= bytes) {
        this.#credit.set(stream, credit - bytes);
        return true;
      }
      await new Promise<void>((resolve) => this.#wake.push(resolve));
    }
  }

  cancelled(stream: number): boolean {
    return this.#cancelled.has(stream);
  }

  /** @internal */
  onHostFrame(f: Frame): boolean {
    if (f.type === T.WINDOW) this.grant(f.stream, f.payload.readUInt32LE(0));
    else if (f.type === T.CANCEL) {
      this.#cancelled.add(f.stream);
      this.#notify();
    } else return false;
    return true;
  }

  /** Until the socket takes more, or is gone. */
  #drained(): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        this.sock.off('drain', done);
        this.sock.off('close', done);
        resolve();
      };
      this.sock.on('drain', done);
      this.sock.on('close', done);
      if (this.#closed) done();
    });
  }

  #notify(): void {
    for (const w of this.#wake.splice(0)) w();
  }
}

/** Answers one request frame of the host's; a rejection is ignored (the host may have left). */
export type Serve = (request: Frame, conn: FakeConnection) => void | Promise<void>;

export class FakeAgent {
  readonly connections: FakeConnection[] = [];

  private constructor(
    readonly path: string,
    private readonly server: Server,
  ) {}

  /** Listens at `dir`/`name`.sock; requests `serve` leaves unanswered stay so. */
  static async start(dir: string, name: string, serve: Serve): Promise<FakeAgent> {
    const path = join(dir, `${name}.sock`);
    const server = createServer();
    const fake = new FakeAgent(path, server);
    server.on('connection', (sock) => fake.#accept(sock, serve));
    await new Promise<void>((resolve) => server.listen(path, resolve));
    return fake;
  }

  /** Bytes written to the host over all connections. */
  get sent(): number {
    return this.connections.reduce((n, c) => n + c.sent, 0);
  }

  connect(): Promise<AgentClient> {
    return AgentClient.connect(this.path);
  }

  /** What QemuVm.agent() does: the current client, or a new one once the channel has ended. */
  reconnecting(): () => Promise<AgentClient> {
    let current: Promise<AgentClient> | null = null;
    return async () => {
      if (current === null || (await current).closed) current = this.connect();
      return current;
    };
  }

  async stop(): Promise<void> {
    for (const c of this.connections) c.sock.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  #accept(sock: Socket, serve: Serve): void {
    sock.on('error', () => undefined);
    let pending: Buffer | null = Buffer.alloc(0);
    let conn: FakeConnection | null = null;
    const decoder = new FrameDecoder((f) => {
      if (conn!.onHostFrame(f)) return;
      void Promise.resolve()
        .then(() => serve(f, conn!))
        .catch(() => undefined);
    }, new Set(Object.values(T)));
    sock.on('data', (chunk: Buffer) => {
      if (pending !== null) {
        // The host's filler, SYNC_MAGIC, then HELLO (u16 version, u16 0, the nonce).
        pending = Buffer.concat([pending, chunk]);
        const at = pending.indexOf(SYNC_MAGIC);
        const hello = at + SYNC_MAGIC.length;
        const helloEnd = hello + HEADER_BYTES + 20 + 1;
        if (at < 0 || pending.length < helloEnd) return;
        const nonce = pending.subarray(hello + HEADER_BYTES + 4, hello + HEADER_BYTES + 20);
        conn = new FakeConnection(sock);
        this.connections.push(conn);
        const ack = Buffer.alloc(40);
        nonce.copy(ack, 0);
        ack.writeUInt16LE(1, 16);
        ack.writeUInt32LE(65536, 20);
        void conn.write(encodeFrame(R.HELLO_ACK, 0, ack));
        chunk = pending.subarray(helloEnd);
        pending = null;
      }
      try {
        decoder.push(chunk);
      } catch {
        sock.destroy();
      }
    });
  }
}

/** The path a LIST_DIR, STAT, MKDIR, ... carries after its fixed part. */
export function requestPath(f: Frame): string {
  const fixed = f.type === T.READ_FILE ? 16 : f.type === T.WRITE_FILE || f.type === T.MKDIR ? 8 : 4;
  return f.payload.subarray(fixed).toString('utf8');
}

export interface FakeEntry {
  name: string | Buffer;
  /** 1 file, 2 directory, ... (docs/agent-protocol.md) */
  type?: number;
  size?: bigint;
  /** The raw 64 bits the agent sends. */
  mtimeBits?: bigint;
}

/** A DIR payload: entries back to back, as files.c packs them. */
export function dirPayload(entries: FakeEntry[]): Buffer {
  return Buffer.concat(
    entries.map((e) => {
      const name = Buffer.isBuffer(e.name) ? e.name : Buffer.from(e.name);
      const b = Buffer.alloc(24 + name.length);
      b[0] = e.type ?? 1;
      b.writeUInt16LE(name.length & 0xffff, 2);
      b.writeUInt32LE(0o644, 4);
      b.writeBigUInt64LE(e.size ?? 0n, 8);
      b.writeBigUInt64LE(e.mtimeBits ?? 0n, 16);
      name.copy(b, 24);
      return b;
    }),
  );
}

export function statPayload(opts: { type?: number; size?: bigint; mtimeBits?: bigint } = {}): Buffer {
  const b = Buffer.alloc(STAT_BYTES);
  b[0] = opts.type ?? 1;
  b.writeUInt32LE(0o644, 4);
  b.writeBigUInt64LE(opts.size ?? 0n, 16);
  b.writeBigUInt64LE(opts.mtimeBits ?? 0n, 24);
  return b;
}

/** A PROC payload: running unless `endBits` is set, with the raw 64 bits of its times. */
export function procPayload(opts: { id: number; command?: string; startBits?: bigint; endBits?: bigint }): Buffer {
  const command = Buffer.from(opts.command ?? 'sleep 1000');
  const b = Buffer.alloc(PROC_INFO_BYTES + command.length);
  b.writeUInt32LE(opts.id, 0);
  b.writeInt32LE(100 + opts.id, 4);
  b[8] = opts.endBits === undefined ? 1 : 2;
  b.writeBigUInt64LE(opts.startBits ?? 1_700_000_000_000_000_000n, 20);
  b.writeBigUInt64LE(opts.endBits ?? 0n, 28);
  command.copy(b, PROC_INFO_BYTES);
  return b;
}

export function errorPayload(kind: number, errno: number, message: string | Buffer): Buffer {
  const text = Buffer.isBuffer(message) ? message : Buffer.from(message);
  const b = Buffer.alloc(8 + text.length);
  b.writeUInt16LE(kind, 0);
  b.writeInt32LE(errno, 4);
  text.copy(b, 8);
  return b;
}

/** What the real agent answers to a request it does not take. */
export const badRequest = (f: Frame): Buffer => encodeFrame(R.ERROR, f.stream, errorPayload(ErrorKind.BAD_REQUEST, 0, `request 0x${f.type.toString(16)} not served`));
