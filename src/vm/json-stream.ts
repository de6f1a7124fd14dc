/**
 * Newline-delimited JSON over a Unix socket, for the QMP client. What arrives is hostile (a
 * guest that escaped into its QEMU controls QMP's side): bytes are kept as the Buffers they came
 * in, each byte is scanned for the newline once, and a line longer than its owner allows ends the
 * connection, never the service.
 */
import { once } from 'node:events';
import { createConnection, type Socket } from 'node:net';
import { sendWithFds } from './vm-ops.js';

const NEWLINE = 0x0a;

export interface JsonStreamOptions {
  /** The longest line acceptable right now, in bytes; asked again for every line. */
  maxLineBytes: () => number;
}

export class JsonStream {
  /** The current line's bytes so far: the chunks that held no newline yet. */
  #partial: Buffer[] = [];
  #partialBytes = 0;
  #closed = false;
  readonly #closeListeners: Array<(err?: Error) => void> = [];

  private constructor(
    private readonly socket: Socket,
    private readonly onMessage: (msg: Record<string, unknown>) => void,
    private readonly options: JsonStreamOptions,
  ) {
    socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    socket.on('error', (err) => this.#close(err));
    socket.on('close', () => this.#close());
  }

  static connect(path: string, onMessage: (msg: Record<string, unknown>) => void, options: JsonStreamOptions, timeoutMs = 2000): Promise<JsonStream> {
    return new Promise((resolve, reject) => {
      const socket = createConnection(path);
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error(`timed out connecting to ${path}`));
      }, timeoutMs);
      socket.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      socket.once('connect', () => {
        clearTimeout(timer);
        socket.removeAllListeners('error');
        resolve(new JsonStream(socket, onMessage, options));
      });
    });
  }

  get closed(): boolean {
    return this.#closed;
  }

  onClose(listener: (err?: Error) => void): void {
    if (this.#closed) listener();
    else this.#closeListeners.push(listener);
  }

  send(msg: object): void {
    if (this.#closed) throw new Error('connection closed');
    this.socket.write(JSON.stringify(msg) + '\n');
  }

  /**
   * Sends a message with descriptors attached (QMP `getfd` and `add-fd` take the ones that come
   * with the command). Waits until Node has nothing of its own queued, so the bytes stay in order.
   */
  async sendWithFds(msg: object, fds: number[]): Promise<void> {
    if (this.#closed) throw new Error('connection closed');
    if (this.socket.writableLength > 0) await once(this.socket, 'drain');
    const fd = (this.socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
    if (typeof fd !== 'number' || fd < 0) throw new Error('the connection has no descriptor to send on');
    const data = Buffer.from(JSON.stringify(msg) + '\n');
    const sent = sendWithFds(fd, data, fds);
    if (sent < data.length) this.socket.write(data.subarray(sent));
  }

  close(): void {
    this.socket.destroy();
    this.#close();
  }

  #onData(chunk: Buffer): void {
    let start = 0;
    while (start < chunk.length && !this.#closed) {
      const nl = chunk.indexOf(NEWLINE, start);
      const end = nl < 0 ? chunk.length : nl;
      if (this.#partialBytes + (end - start) > this.options.maxLineBytes()) {
        this.#close(new Error(`peer sent a message longer than the ${this.options.maxLineBytes()} bytes its request allows`));
        this.socket.destroy();
        return;
      }
      if (nl < 0) {
        this.#partial.push(chunk.subarray(start));
        this.#partialBytes += chunk.length - start;
        return;
      }
      const line = this.#partialBytes === 0 ? chunk.subarray(start, nl) : Buffer.concat([...this.#partial, chunk.subarray(start, nl)]);
      this.#partial = [];
      this.#partialBytes = 0;
      start = nl + 1;
      this.#deliver(line);
    }
  }

  #deliver(line: Buffer): void {
    let msg: unknown;
    try {
      msg = JSON.parse(line.toString('utf8'));
    } catch {
      return; // a blank or broken line is skipped
    }
    if (typeof msg === 'object' && msg !== null && !Array.isArray(msg)) this.onMessage(msg as Record<string, unknown>);
  }

  #close(err?: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#partial = [];
    for (const l of this.#closeListeners.splice(0)) l(err);
  }
}
