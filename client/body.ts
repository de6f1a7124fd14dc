/**
 * What a caller may send as a raw request body (a file, stdin, a tar archive), turned into what
 * fetch sends, and whether it could be sent a second time. Node's Readable is an async iterable
 * of Buffers (which are Uint8Arrays), so it is taken as one without importing anything of Node.
 */
import type { RequestSafety } from './retry.js';

export type BodySource = string | Uint8Array | ArrayBuffer | Blob | ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string>;

/** openapi-fetch options that send `source` as it is, under `contentType`. */
export interface RawBodyInit {
  /** openapi-fetch serializes only a defined body; the serializer below hands over the real one. */
  body: never;
  bodySerializer: () => BodyInit;
  headers: { 'content-type': string };
  /** fetch needs this to stream a request body (Node, and browsers that can). */
  duplex?: 'half';
}

export interface RawBody {
  init: RawBodyInit;
  /** A stream is consumed by the first attempt; anything else can be sent again. */
  safety: RequestSafety;
}

const encoder = new TextEncoder();

/** Pulls the iterable only as fast as fetch reads, and stops it when fetch gives up. */
function streamOf(source: AsyncIterable<Uint8Array | string>): ReadableStream<Uint8Array> {
  const iterator = source[Symbol.asyncIterator]();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        const next = await iterator.next();
        if (next.done === true) controller.close();
        else controller.enqueue(typeof next.value === 'string' ? encoder.encode(next.value) : next.value);
      },
      async cancel(reason) {
        await iterator.return?.(reason);
      },
    },
    { highWaterMark: 0 },
  );
}

const isStreamed = (source: BodySource): source is ReadableStream<Uint8Array> | AsyncIterable<Uint8Array | string> =>
  typeof ReadableStream !== 'undefined' && source instanceof ReadableStream ? true : typeof source === 'object' && Symbol.asyncIterator in source;

/** `safety` is what repeating the request would do if its body could be sent again. */
export function rawBody(source: BodySource, contentType: string, safety: RequestSafety): RawBody {
  const headers = { 'content-type': contentType };
  if (!isStreamed(source)) {
    // TypeScript's lib takes only ArrayBuffer-backed views as BodyInit; fetch takes any.
    const body = (typeof source === 'string' ? encoder.encode(source) : source) as BodyInit;
    return { init: { body: source as never, bodySerializer: () => body, headers }, safety };
  }
  const stream = source instanceof ReadableStream ? source : streamOf(source);
  return { init: { body: source as never, bodySerializer: () => stream, headers, duplex: 'half' }, safety: 'not-replayable' };
}
