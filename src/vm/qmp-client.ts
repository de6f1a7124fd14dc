/**
 * A QMP client: greeting, capability negotiation, then commands with monotonic ids matched to
 * their replies. Every pending command is rejected when the socket closes; replies with unknown
 * ids are dropped. Events go to listeners that can wait for one matching event.
 */
import { JsonStream } from './json-stream.js';

/** QMP replies and events are small (the largest we read is query-migrate); QEMU is less trusted than us. */
const QMP_MAX_MESSAGE_BYTES = 1024 * 1024;

export class QmpError extends Error {
  constructor(
    readonly qmpClass: string,
    message: string,
  ) {
    super(message);
  }
}

type Pending = { resolve: (v: unknown) => void; reject: (e: Error) => void; timer: NodeJS.Timeout };
type EventListener = (event: string, data: Record<string, unknown>) => void;

export class QmpClient {
  #state: 'greeting' | 'capabilities' | 'running' | 'closed' = 'greeting';
  #nextId = 1;
  readonly #pending = new Map<number, Pending>();
  readonly #listeners = new Set<EventListener>();
  #stream!: JsonStream;
  #greeted!: () => void;

  private constructor() {}

  static async connect(path: string, timeoutMs = 5000): Promise<QmpClient> {
    const client = new QmpClient();
    const greeted = new Promise<void>((resolve) => (client.#greeted = resolve));
    client.#stream = await JsonStream.connect(path, (msg) => client.#onMessage(msg), { maxLineBytes: () => QMP_MAX_MESSAGE_BYTES }, timeoutMs);
    client.#stream.onClose(() => client.#onClose());
    await withTimeout(greeted, timeoutMs, 'QMP greeting');
    client.#state = 'capabilities';
    await client.execute('qmp_capabilities');
    client.#state = 'running';
    return client;
  }

  get closed(): boolean {
    return this.#state === 'closed';
  }

  onClose(listener: () => void): void {
    this.#stream.onClose(() => listener());
  }

  execute<T = unknown>(command: string, args?: Record<string, unknown>, timeoutMs = 30_000): Promise<T> {
    return this.#execute<T>(command, args, timeoutMs, null);
  }

  /** A command that takes descriptors (`getfd`, `add-fd`): they travel with it (SCM_RIGHTS). */
  executeWithFds<T = unknown>(command: string, args: Record<string, unknown>, fds: number[], timeoutMs = 30_000): Promise<T> {
    return this.#execute<T>(command, args, timeoutMs, fds);
  }

  #execute<T>(command: string, args: Record<string, unknown> | undefined, timeoutMs: number, fds: number[] | null): Promise<T> {
    if (this.#state === 'closed') return Promise.reject(new Error('QMP connection closed'));
    const id = this.#nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(id);
        reject(new Error(`QMP ${command} timed out`));
      }, timeoutMs);
      this.#pending.set(id, { resolve: resolve as (v: unknown) => void, reject, timer });
      const msg = args === undefined ? { execute: command, id } : { execute: command, arguments: args, id };
      if (fds === null) return this.#stream.send(msg);
      this.#stream.sendWithFds(msg, fds).catch((err: Error) => {
        clearTimeout(timer);
        this.#pending.delete(id);
        reject(err);
      });
    });
  }

  /** Listen, then run `action`, then await the event: no event can slip between the two. */
  async waitForEvent(name: string, action: () => Promise<unknown>, timeoutMs: number, filter: (data: Record<string, unknown>) => boolean = () => true): Promise<Record<string, unknown>> {
    let listener!: EventListener;
    const seen = new Promise<Record<string, unknown>>((resolve) => {
      listener = (event, data) => {
        if (event === name && filter(data)) resolve(data);
      };
      this.#listeners.add(listener);
    });
    try {
      await action();
      return await withTimeout(seen, timeoutMs, `QMP event ${name}`);
    } finally {
      this.#listeners.delete(listener);
    }
  }

  onEvent(listener: EventListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  close(): void {
    this.#stream.close();
  }

  #onMessage(msg: Record<string, unknown>): void {
    if ('QMP' in msg) return this.#greeted();
    if (typeof msg.event === 'string') {
      for (const l of this.#listeners) l(msg.event, (msg.data ?? {}) as Record<string, unknown>);
      return;
    }
    const id = msg.id;
    if (typeof id !== 'number') return;
    const p = this.#pending.get(id);
    if (p === undefined) return;
    this.#pending.delete(id);
    clearTimeout(p.timer);
    if ('error' in msg) {
      const e = msg.error as { class?: string; desc?: string };
      p.reject(new QmpError(e.class ?? 'GenericError', e.desc ?? 'QMP error'));
    } else {
      p.resolve(msg.return);
    }
  }

  #onClose(): void {
    this.#state = 'closed';
    for (const [id, p] of this.#pending) {
      clearTimeout(p.timer);
      p.reject(new Error('QMP connection closed'));
      this.#pending.delete(id);
    }
  }
}

export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
