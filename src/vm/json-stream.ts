/**
 * Newline-delimited JSON over a Unix socket, shared by the QMP and guest-agent clients. The read
 * buffer is capped: a peer that sends an endless line is cut off rather than exhausting memory.
 */
import { createConnection, type Socket } from 'node:net';

export const MAX_LINE_BYTES = 64 * 1024 * 1024;

export class JsonStream {
  #buffer = '';
  #closed = false;
  readonly #closeListeners: Array<(err?: Error) => void> = [];

  private constructor(
    private readonly socket: Socket,
    private readonly onMessage: (msg: Record<string, unknown>) => void,
  ) {
    socket.setEncoding('latin1');
    socket.on('data', (chunk: string) => this.#onData(chunk));
    socket.on('error', (err) => this.#close(err));
    socket.on('close', () => this.#close());
  }

  static connect(path: string, onMessage: (msg: Record<string, unknown>) => void, timeoutMs = 2000): Promise<JsonStream> {
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
        resolve(new JsonStream(socket, onMessage));
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

  /** Sends raw bytes (the guest agent's 0xFF resync marker). */
  sendRaw(bytes: Buffer): void {
    this.socket.write(bytes);
  }

  /** Drops everything buffered up to and including the 0xFF that precedes a delimited sync reply. */
  discardUntilSentinel(): void {
    this.#awaitingSentinel = true;
    this.#buffer = '';
  }

  #awaitingSentinel = false;

  close(): void {
    this.socket.destroy();
    this.#close();
  }

  #onData(chunk: string): void {
    if (this.#awaitingSentinel) {
      const i = chunk.indexOf('\xff');
      if (i < 0) return;
      this.#awaitingSentinel = false;
      chunk = chunk.slice(i + 1);
    }
    this.#buffer += chunk;
    if (this.#buffer.length > MAX_LINE_BYTES) {
      this.#close(new Error('peer sent an oversized message'));
      this.socket.destroy();
      return;
    }
    let nl: number;
    while ((nl = this.#buffer.indexOf('\n')) >= 0) {
      const line = this.#buffer.slice(0, nl).trim();
      this.#buffer = this.#buffer.slice(nl + 1);
      if (line === '') continue;
      let msg: unknown;
      try {
        // latin1 decoding keeps bytes intact; JSON from QEMU is UTF-8, so re-decode.
        msg = JSON.parse(Buffer.from(line, 'latin1').toString('utf8'));
      } catch {
        continue; // garbage after a reconnect; the sync protocol recovers from it
      }
      if (typeof msg === 'object' && msg !== null) this.onMessage(msg as Record<string, unknown>);
    }
  }

  #close(err?: Error): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const l of this.#closeListeners.splice(0)) l(err);
  }
}
