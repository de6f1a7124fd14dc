/**
 * Deadlines for the clients of an HTTP server that is only handed sockets (ingress, and the egress
 * proxy's server for plain and intercepted HTTP). Node starts its own headersTimeout and
 * requestTimeout checks on 'listening', which such a server never emits, so without these a client
 * that trickled a request head or body held its connection, its place under the connection caps
 * and whatever upstream its request had opened, for as long as it liked.
 *
 * While a connection waits on its client:
 * - the request head must be whole within `headersTimeoutMs` of accept, and on a kept-alive
 *   connection within the longer of that and the server's keep-alive of the previous response's
 *   end (so an idle kept-alive connection is not cut before the keep-alive the server announces);
 * - the whole request, body included, within `requestTimeoutMs` of when its head was awaited;
 * - and while the body is read, at least BODY_PROGRESS_BYTES within every `bodyIdleTimeoutMs`.
 *   Time the body is not being read (its receiver is slow, or still being decided on) is not the
 *   client's and does not count.
 * While the response is made and sent, no deadline applies: the server's upstream answers, not the
 * client. An expired connection is destroyed: its request's upstream is destroyed with it (each
 * server does so when a request closes incomplete), and its places under the caps are given back
 * (every cap counts by the accepted socket's 'close').
 *
 * One sweep per server checks every connection; progress is read from the accepted socket's byte
 * count, which counts what Node's parser or TLS consumes directly (no 'data' events then).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** What a server's options may set; each has the default below. */
export interface RequestDeadlineOptions {
  headersTimeoutMs?: number;
  requestTimeoutMs?: number;
  bodyIdleTimeoutMs?: number;
}

/** A whole request head: Node's own default is 60 s; a real client sends its head at once. */
export const HEADERS_TIMEOUT_MS = 20_000;
/**
 * A whole request: generous, because the progress rule below already ends what is slow for no
 * reason; an hour still takes a 1 GiB upload at 300 KB/s, and ends one that goes at the minimum
 * rate (a few MB) instead of letting it run for days.
 */
export const REQUEST_TIMEOUT_MS = 60 * 60_000;
/**
 * The body's progress window: 16 KiB in 30 s is about 550 B/s, Apache's mod_reqtimeout default
 * minimum rate (500 B/s), which any link still in use meets; a byte every 10 s does not. A small
 * body that arrives whole never meets the rule at all.
 */
export const BODY_IDLE_TIMEOUT_MS = 30_000;
export const BODY_PROGRESS_BYTES = 16 * 1024;

type Waiting =
  | { req: null; due: number; since: number }
  | { req: IncomingMessage; due: number; read: number; progressAt: number };

export class RequestDeadlines {
  readonly #headersMs: number;
  readonly #requestMs: number;
  readonly #idleMs: number;
  /** Each accepted socket whose client we wait on, by the accepted socket (under any TLS). */
  readonly #waiting = new Map<Socket, Waiting>();
  #sweep: NodeJS.Timeout | null = null;

  /** `keepAliveMs`: the server's keep-alive timeout, which the next head after a response may also take. */
  constructor(opts: RequestDeadlineOptions, private readonly keepAliveMs = 0) {
    this.#headersMs = opts.headersTimeoutMs ?? HEADERS_TIMEOUT_MS;
    this.#requestMs = opts.requestTimeoutMs ?? REQUEST_TIMEOUT_MS;
    this.#idleMs = opts.bodyIdleTimeoutMs ?? BODY_IDLE_TIMEOUT_MS;
  }

  start(): void {
    const every = Math.max(10, Math.min(1000, Math.min(this.#headersMs, this.#idleMs) / 4));
    this.#sweep = setInterval(() => this.#expire(Date.now()), every);
    this.#sweep.unref();
  }

  /** Stops the sweep and closes every connection still waiting on its client. */
  stop(): void {
    if (this.#sweep !== null) clearInterval(this.#sweep);
    this.#sweep = null;
    for (const socket of this.#waiting.keys()) socket.destroy();
  }

  /** From now, the accepted `socket` has the headers timeout to deliver its first request head. */
  admit(socket: Socket): void {
    this.#awaitHead(socket, this.#headersMs);
    socket.once('close', () => this.#waiting.delete(socket));
  }

  /**
   * The head of `req` arrived on `socket` (the accepted one): its body now has its deadlines, and
   * once `res` has been sent, the next head has its own (what is left of a body answered before
   * it ended falls under that one). Another request begun meanwhile (pipelined) takes over.
   */
  request(socket: Socket, req: IncomingMessage, res: ServerResponse): void {
    const since = this.#waiting.get(socket);
    if (since === undefined) return;
    const start = since.req === null ? since.since : Date.now();
    this.#waiting.set(socket, { req, due: start + this.#requestMs, read: socket.bytesRead, progressAt: Date.now() });
    res.once('finish', () => {
      if (!socket.destroyed && this.#waiting.get(socket)?.req === req) this.#awaitHead(socket, Math.max(this.#headersMs, this.keepAliveMs));
    });
  }

  /** No more deadlines for `socket`: it was upgraded, and its bytes now flow both ways. */
  release(socket: Socket): void {
    this.#waiting.delete(socket);
  }

  #awaitHead(socket: Socket, ms: number): void {
    const now = Date.now();
    this.#waiting.set(socket, { req: null, due: now + ms, since: now });
  }

  #expire(now: number): void {
    for (const [socket, w] of this.#waiting) {
      // Whole: the rest is the response's, whose end awaits the next head.
      if (w.req?.complete === true) continue;
      if (now > w.due) {
        socket.destroy();
        continue;
      }
      if (w.req === null) continue;
      const read = socket.bytesRead;
      if (w.req.readableFlowing !== true || read - w.read >= BODY_PROGRESS_BYTES) {
        w.read = read;
        w.progressAt = now;
      } else if (now - w.progressAt > this.#idleMs) {
        socket.destroy();
      }
    }
  }
}
