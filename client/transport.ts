/**
 * The typed HTTP client every object of the SDK shares: openapi-fetch over the generated paths,
 * the bearer token, and one place where failures become VesselErrors and are retried where that
 * is safe (retry.ts).
 */
import createClient, { type Client } from 'openapi-fetch';
import { connectionError, errorFromResponse, type VesselError } from './errors.js';
import type { paths } from './generated/openapi.js';
import { DEFAULT_RETRY_POLICY, retryWait, sleep, type RequestSafety, type RetryPolicy } from './retry.js';
import type { WebSocketClass } from './websocket.js';

export interface VesselOptions {
  /** Where the service listens, e.g. `https://vessel.example` (paths start with /v1 below it). */
  url: string;
  /** A bearer token (`vsl_…`). */
  token: string;
  /** How failed requests are retried; `{ maxRetries: 0 }` turns retrying off. */
  retry?: Partial<RetryPolicy> | undefined;
  /** The fetch to use instead of the global one. */
  fetch?: typeof globalThis.fetch | undefined;
  /** The WebSocket class for terminals, instead of the global one (or the `ws` package on Node 20, which has none). */
  WebSocket?: WebSocketClass | undefined;
}

/** What every method takes besides its own arguments. */
export interface CallOptions {
  /** Aborting it abandons the request (and any retry still to come); the promise rejects with the signal's reason. */
  signal?: AbortSignal | undefined;
}

/** What an openapi-fetch method resolves to. */
interface ApiAnswer {
  data?: unknown;
  error?: unknown;
  response: Response;
}

export class Transport {
  /**
   * Answers are typed by their JSON bodies: an operation that also streams (exec) would otherwise
   * answer a union with its events. Streams and files are read with parseAs 'stream' where they
   * are asked for, and typed there.
   */
  readonly api: Client<paths, 'application/json'>;
  readonly url: string;
  readonly token: string;
  readonly retry: RetryPolicy;
  readonly WebSocket: WebSocketClass | undefined;

  constructor(options: VesselOptions) {
    this.url = options.url.replace(/\/+$/, '');
    this.token = options.token;
    this.retry = { ...DEFAULT_RETRY_POLICY, ...options.retry };
    this.WebSocket = options.WebSocket;
    this.api = createClient<paths, 'application/json'>({
      baseUrl: this.url,
      headers: { authorization: `Bearer ${options.token}` },
      ...(options.fetch === undefined ? {} : { fetch: options.fetch }),
    });
  }

  /** Sends a request until it succeeds, fails for good, or runs out of retries; returns the answer. */
  async send<A extends ApiAnswer>(safety: RequestSafety, options: CallOptions | undefined, request: (signal: AbortSignal | undefined) => Promise<A>): Promise<A> {
    const signal = options?.signal;
    for (let retry = 0; ; retry++) {
      signal?.throwIfAborted();
      let error: VesselError;
      try {
        const answer = await request(signal);
        if (answer.response.ok) return answer;
        error = errorFromResponse(answer.response, answer.error);
      } catch (err) {
        if (signal?.aborted === true) throw signal.reason;
        // fetch rejects with a TypeError when no response came; anything else is not ours to hide.
        if (!(err instanceof TypeError)) throw err;
        error = connectionError(err);
      }
      const delay = retryWait(retry, error, safety, this.retry);
      if (delay === null) throw error;
      await sleep(delay, signal);
    }
  }

  /** The whole body of a successful answer: for lists, whose envelope carries next_page_token beside data. */
  async body<A extends ApiAnswer>(safety: RequestSafety, options: CallOptions | undefined, request: (signal: AbortSignal | undefined) => Promise<A>): Promise<Exclude<A['data'], undefined>> {
    return (await this.send(safety, options, request)).data as Exclude<A['data'], undefined>;
  }

  /** The `data` of a successful answer's envelope. */
  async call<A extends ApiAnswer>(safety: RequestSafety, options: CallOptions | undefined, request: (signal: AbortSignal | undefined) => Promise<A>): Promise<Success<A>['data']> {
    const answer = await this.send(safety, options, request);
    return (answer.data as Success<A>).data;
  }
}

/** The body of an openapi-fetch answer that succeeded: an envelope with `data`. */
type Success<A extends ApiAnswer> = Exclude<A['data'], undefined> extends { data: infer D } ? { data: D } : never;
