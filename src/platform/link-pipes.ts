/**
 * Bytes between link streams and Node streams: a source's bytes out over a stream, a stream's
 * bytes in as a Readable, and one stream's bytes on into another (the host process relays the
 * API's guest streams to the agent's process this way). Each keeps the stream's credit: nothing
 * is read from a source faster than the far side takes it.
 */
import { Readable } from 'node:stream';
import type { LinkStream } from './part-link.js';

/** Sends `body` over `stream`, then its end; the peer's cancel stops reading it, a failure fails the stream as `toError` says. */
export function sendAll(body: AsyncIterable<Buffer> & { destroy?(): void }, stream: LinkStream, toError: (err: unknown) => Error): void {
  stream.onCancel(() => body.destroy?.());
  void (async () => {
    try {
      for await (const chunk of body) await stream.write(chunk);
      stream.end();
    } catch (err) {
      stream.fail(toError(err));
    }
  })();
}

/** The bytes the peer sends on `stream`, as a Readable; closing it early cancels the stream. */
export function readableOf(stream: LinkStream, toError: (err: unknown) => Error): Readable {
  const readable = Readable.from(
    (async function* () {
      try {
        for await (const chunk of stream) yield chunk.data;
      } catch (err) {
        throw toError(err);
      }
    })(),
    { highWaterMark: 1 },
  );
  readable.once('close', () => stream.cancel());
  return readable;
}

/**
 * What `from` receives goes on through `to`, chunk by chunk with its meta, then its end value or
 * its failure (as `toError` makes it). When `to`'s peer stops reading, `from` is cancelled.
 */
export async function forward(from: LinkStream, to: LinkStream, toError: (err: unknown) => Error): Promise<void> {
  to.onCancel(() => from.cancel());
  try {
    for await (const chunk of from) {
      try {
        await to.write(chunk.data, chunk.meta ?? undefined);
      } catch {
        from.cancel(); // the far side stopped reading
        return;
      }
    }
    to.end(await from.result);
  } catch (err) {
    to.fail(toError(err));
  }
}
