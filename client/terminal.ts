/**
 * A terminal in a runtime over a WebSocket (docs/processes.md, "Terminals"): binary messages are
 * the terminal's bytes each way, text messages JSON control (resize from us, exit from the
 * service).
 */

export interface TerminalExit {
  /** The shell's exit status (128 + n after signal n); null when the socket closed without an exit. */
  exit_code: number | null;
  signal: number | null;
}

export type DataListener = (bytes: Uint8Array) => void;
export type ExitListener = (exit: TerminalExit) => void;

/**
 * Output that arrives before anyone listens (the prompt comes with the socket's first bytes) is
 * kept for the first listener, up to this much; beyond it the oldest is dropped, as a screen
 * would scroll it away.
 */
const MAX_UNHEARD_BYTES = 1024 * 1024;

const encoder = new TextEncoder();

export class Terminal {
  readonly #socket: WebSocket;
  readonly #dataListeners = new Set<DataListener>();
  readonly #exitListeners = new Set<ExitListener>();
  #unheard: Uint8Array[] = [];
  #unheardBytes = 0;
  #exit: TerminalExit | null = null;
  readonly #closed: Promise<TerminalExit>;

  /** Takes over an open socket (rt.terminal() opens it). */
  constructor(socket: WebSocket) {
    this.#socket = socket;
    socket.addEventListener('message', (event: MessageEvent) => this.#receive(event.data));
    this.#closed = new Promise((resolve) => {
      socket.addEventListener('close', () => resolve(this.#exit ?? { exit_code: null, signal: null }), { once: true });
    });
  }

  /** Sends input: text as UTF-8, bytes as they are (Ctrl-C is "\x03"). */
  write(data: string | Uint8Array): void {
    this.#socket.send(typeof data === 'string' ? encoder.encode(data) : data);
  }

  /** The program gets SIGWINCH; `stty size` shows the new size. */
  resize(rows: number, cols: number): void {
    this.#socket.send(JSON.stringify({ type: 'resize', rows, cols }));
  }

  /** Listens to the terminal's output; returns the function that stops listening. */
  onData(listener: DataListener): () => void {
    this.#dataListeners.add(listener);
    const unheard = this.#unheard;
    this.#unheard = [];
    this.#unheardBytes = 0;
    for (const bytes of unheard) listener(bytes);
    return () => this.#dataListeners.delete(listener);
  }

  /** Called once the shell exits (before the socket closes). */
  onExit(listener: ExitListener): () => void {
    if (this.#exit !== null) listener(this.#exit);
    else this.#exitListeners.add(listener);
    return () => this.#exitListeners.delete(listener);
  }

  /** Resolves when the socket has closed, with the exit if the shell exited. */
  wait(): Promise<TerminalExit> {
    return this.#closed;
  }

  /** Closes the socket: a shell the socket started gets SIGHUP, an attached process runs on. */
  close(): Promise<TerminalExit> {
    this.#socket.close(1000);
    return this.#closed;
  }

  #receive(data: unknown): void {
    if (typeof data === 'string') return this.#control(data);
    const bytes = new Uint8Array(data as ArrayBuffer);
    if (this.#dataListeners.size > 0) {
      for (const listener of this.#dataListeners) listener(bytes);
      return;
    }
    this.#unheard.push(bytes);
    this.#unheardBytes += bytes.length;
    while (this.#unheardBytes > MAX_UNHEARD_BYTES) this.#unheardBytes -= this.#unheard.shift()!.length;
  }

  #control(text: string): void {
    let message: { type?: unknown; exit_code?: unknown; signal?: unknown };
    try {
      message = JSON.parse(text) as typeof message;
    } catch {
      return; // not ours to understand: a newer service's message
    }
    if (message.type !== 'exit') return;
    this.#exit = { exit_code: typeof message.exit_code === 'number' ? message.exit_code : null, signal: typeof message.signal === 'number' ? message.signal : null };
    for (const listener of this.#exitListeners) listener(this.#exit);
    this.#exitListeners.clear();
  }
}
