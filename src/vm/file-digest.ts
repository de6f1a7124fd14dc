/**
 * Digests of checkpoint files, recorded in the manifest at capture and checked before a fork.
 *
 * A checkpoint's `ram` is a sparse file as large as the guest's memory, mostly zeros; hashing
 * every zero costs more than reading it. So the digest is a hash list: SHA-256 over the SHA-256
 * of each 1 MiB chunk, where an all-zero chunk (found by a memcmp, an order of magnitude faster
 * than hashing it) contributes a digest computed once. The result still changes with any byte of
 * the file, and with its length. It is computed as the bytes go by wherever the service writes a
 * checkpoint file itself, so a capture does not read its files a second time.
 */
import { createHash, type Hash } from 'node:crypto';
import { open, type FileHandle } from 'node:fs/promises';

export const CHUNK_BYTES = 1024 * 1024;
const ZERO_CHUNK = Buffer.alloc(CHUNK_BYTES);
const ZERO_CHUNK_DIGEST = createHash('sha256').update(ZERO_CHUNK).digest();
/** Names the construction, so that a digest made another way can never compare equal by accident. */
const ALGORITHM = 'sha256-chunks-1m';

export const isZeroChunk = (chunk: Buffer): boolean => chunk.length === CHUNK_BYTES && chunk.equals(ZERO_CHUNK);

/** The digest of a byte stream fed in pieces of any size. */
export class ChunkedDigest {
  readonly #list: Hash = createHash('sha256');
  readonly #pending = Buffer.allocUnsafe(CHUNK_BYTES);
  #pendingBytes = 0;
  #length = 0;

  update(data: Buffer): void {
    this.#length += data.length;
    let offset = 0;
    // Whole chunks straight from the caller's buffer; only the edges are copied.
    if (this.#pendingBytes === 0) {
      for (; data.length - offset >= CHUNK_BYTES; offset += CHUNK_BYTES) this.#addChunk(data.subarray(offset, offset + CHUNK_BYTES));
    }
    while (offset < data.length) {
      const n = Math.min(CHUNK_BYTES - this.#pendingBytes, data.length - offset);
      data.copy(this.#pending, this.#pendingBytes, offset, offset + n);
      this.#pendingBytes += n;
      offset += n;
      if (this.#pendingBytes === CHUNK_BYTES) {
        this.#addChunk(this.#pending);
        this.#pendingBytes = 0;
      }
    }
  }

  digest(): string {
    if (this.#pendingBytes > 0) this.#addChunk(this.#pending.subarray(0, this.#pendingBytes));
    this.#pendingBytes = 0;
    this.#list.update(`${this.#length}`);
    return `${ALGORITHM}:${this.#list.digest('hex')}`;
  }

  #addChunk(chunk: Buffer): void {
    this.#list.update(isZeroChunk(chunk) ? ZERO_CHUNK_DIGEST : createHash('sha256').update(chunk).digest());
  }
}

export async function digestFile(path: string): Promise<string> {
  const handle = await open(path, 'r');
  try {
    const digest = new ChunkedDigest();
    const buf = Buffer.allocUnsafe(CHUNK_BYTES);
    for (;;) {
      const n = await readFull(handle, buf);
      if (n > 0) digest.update(buf.subarray(0, n));
      if (n < CHUNK_BYTES) return digest.digest();
    }
  } finally {
    await handle.close();
  }
}

/**
 * Copies `from` to a new file `to` (mode 0600) as a sparse file: all-zero chunks are left as
 * holes. Returns the digest of what it copied, read once.
 */
export async function copySparseWithDigest(from: string, to: string): Promise<string> {
  const src = await open(from, 'r');
  let dst: FileHandle | null = null;
  try {
    dst = await open(to, 'wx', 0o600);
    const digest = new ChunkedDigest();
    const buf = Buffer.allocUnsafe(CHUNK_BYTES);
    let position = 0;
    for (;;) {
      const n = await readFull(src, buf);
      const chunk = buf.subarray(0, n);
      if (n > 0) digest.update(chunk);
      if (n > 0 && !isZeroChunk(chunk)) await dst.write(chunk, 0, n, position);
      position += n;
      if (n < CHUNK_BYTES) break;
    }
    await dst.truncate(position);
    return digest.digest();
  } finally {
    await src.close();
    await dst?.close();
  }
}

/** A read that fills the buffer unless the file ends first (a plain read may return less). */
export async function readFull(handle: FileHandle, buf: Buffer): Promise<number> {
  let total = 0;
  while (total < buf.length) {
    const { bytesRead } = await handle.read(buf, total, buf.length - total, null);
    if (bytesRead === 0) break;
    total += bytesRead;
  }
  return total;
}
