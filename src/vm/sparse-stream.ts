/**
 * How a checkpoint's file crosses to another VM host: a sequence of frames, one per 1 MiB chunk
 * of the file, where an all-zero chunk is a 5-byte hole frame. A RAM file as large as the guest's
 * memory is mostly holes, so an idle 4 GiB guest's RAM is sent as its few hundred MiB of pages.
 *
 * A frame is a kind byte and a big-endian 32-bit length, then, for data, that many bytes. The
 * stream ends with an end frame, so a cut connection is never taken for a short file. The reader
 * treats the stream as hostile: lengths over a chunk, a file past its bound, an unknown kind or a
 * missing end are refused, and it keeps no more than one frame in memory.
 */
import { open } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { CHUNK_BYTES, ChunkedDigest, isZeroChunk, readFull } from './file-digest.js';

const HEADER_BYTES = 5;
const enum Kind {
  Hole = 0,
  Data = 1,
  End = 2,
}

/** A frame's kind from its first byte; null for a byte that names none. */
const kindOf = (byte: number): Kind | null => (byte === 0 ? Kind.Hole : byte === 1 ? Kind.Data : byte === 2 ? Kind.End : null);

const header = (kind: Kind, length: number): Buffer => {
  const b = Buffer.allocUnsafe(HEADER_BYTES);
  b.writeUInt8(kind, 0);
  b.writeUInt32BE(length, 1);
  return b;
};

/** The file at `path` as frames, read a chunk at a time. */
export function sparseFrames(path: string): Readable {
  return Readable.from(
    (async function* () {
      const handle = await open(path, 'r');
      try {
        for (;;) {
          const buf = Buffer.allocUnsafe(CHUNK_BYTES);
          const n = await readFull(handle, buf);
          if (n === 0) break;
          const chunk = buf.subarray(0, n);
          if (isZeroChunk(chunk)) {
            yield header(Kind.Hole, n);
          } else {
            yield header(Kind.Data, n);
            yield chunk;
          }
          if (n < CHUNK_BYTES) break;
        }
        yield header(Kind.End, 0);
      } finally {
        await handle.close();
      }
    })(),
    { objectMode: false },
  );
}

export class SparseStreamError extends Error {}

/**
 * Writes the frames of `frames` into a new file at `path` (mode 0600, holes left as holes) and
 * returns the digest of its contents. Refuses a stream that would make the file larger than
 * `maxBytes`, or that is malformed or cut short; the caller removes what was written then.
 */
export async function writeSparseFrames(frames: AsyncIterable<Buffer>, path: string, maxBytes: number): Promise<string> {
  const file = await open(path, 'wx', 0o600);
  try {
    const digest = new ChunkedDigest();
    const zeros = Buffer.alloc(CHUNK_BYTES);
    let position = 0;
    let ended = false;
    // Pieces as they came, joined only once a whole frame is there: each byte is copied a bounded
    // number of times however the peer slices the stream, and no more than a frame is held.
    const parts: Buffer[] = [];
    let held = 0;
    const take = (n: number): Buffer => {
      const all = parts.length === 1 ? parts[0]! : Buffer.concat(parts, held);
      parts.length = 0;
      held = all.length - n;
      if (held > 0) parts.push(all.subarray(n));
      return all.subarray(0, n);
    };
    // The header's five bytes, from as few of the first pieces as hold them.
    const peekHeader = (): { kind: Kind; length: number } => {
      let head = parts[0]!;
      for (let i = 1; head.length < HEADER_BYTES; i++) head = Buffer.concat([head, parts[i]!]);
      const kind = kindOf(head.readUInt8(0));
      if (kind === null) throw new SparseStreamError(`unknown frame kind ${head.readUInt8(0)}`);
      return { kind, length: head.readUInt32BE(1) };
    };
    for await (const piece of frames) {
      if (ended) throw new SparseStreamError('bytes after the end frame');
      if (piece.length === 0) continue;
      parts.push(piece);
      held += piece.length;
      while (held >= HEADER_BYTES) {
        const { kind, length } = peekHeader();
        if (length > CHUNK_BYTES) throw new SparseStreamError(`a frame of ${length} bytes is over the ${CHUNK_BYTES}-byte chunk`);
        if (kind === Kind.End) {
          if (length !== 0 || held > HEADER_BYTES) throw new SparseStreamError('bytes after the end frame');
          take(HEADER_BYTES);
          ended = true;
          break;
        }
        if (position + length > maxBytes) throw new SparseStreamError(`the file would be over its bound of ${maxBytes} bytes`);
        if (kind === Kind.Hole) {
          take(HEADER_BYTES);
          digest.update(zeros.subarray(0, length));
        } else {
          if (held < HEADER_BYTES + length) break;
          const data = take(HEADER_BYTES + length).subarray(HEADER_BYTES);
          digest.update(data);
          await file.write(data, 0, length, position);
        }
        position += length;
      }
    }
    if (!ended) throw new SparseStreamError('the stream ended before its end frame');
    await file.truncate(position);
    await file.sync();
    return digest.digest();
  } finally {
    await file.close();
  }
}
