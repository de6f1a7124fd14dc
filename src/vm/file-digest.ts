/**
 * Digests of checkpoint files, recorded in the manifest at capture and checked before a fork.
 *
 * A checkpoint's `ram` is a sparse file as large as the guest's memory, mostly zeros; hashing
 * every zero costs more than reading it. So the digest is a hash list: SHA-256 over the SHA-256
 * of each 1 MiB chunk, where an all-zero chunk (found by a memcmp, an order of magnitude faster
 * than hashing it) contributes a digest computed once. The result still changes with any byte of
 * the file, and with its length.
 */
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';

const CHUNK_BYTES = 1024 * 1024;
const ZERO_CHUNK = Buffer.alloc(CHUNK_BYTES);
const ZERO_CHUNK_DIGEST = createHash('sha256').update(ZERO_CHUNK).digest();
/** Names the construction, so that a digest made another way can never compare equal by accident. */
const ALGORITHM = 'sha256-chunks-1m';

export async function digestFile(path: string): Promise<string> {
  const handle = await open(path, 'r');
  try {
    const list = createHash('sha256');
    const buf = Buffer.allocUnsafe(CHUNK_BYTES);
    let length = 0;
    for (;;) {
      const { bytesRead } = await readFull(handle, buf);
      if (bytesRead === 0) break;
      length += bytesRead;
      const chunk = bytesRead === CHUNK_BYTES ? buf : buf.subarray(0, bytesRead);
      list.update(bytesRead === CHUNK_BYTES && chunk.equals(ZERO_CHUNK) ? ZERO_CHUNK_DIGEST : createHash('sha256').update(chunk).digest());
      if (bytesRead < CHUNK_BYTES) break;
    }
    list.update(`${length}`);
    return `${ALGORITHM}:${list.digest('hex')}`;
  } finally {
    await handle.close();
  }
}

/** A read that fills the buffer unless the file ends first (a plain read may return less). */
async function readFull(handle: Awaited<ReturnType<typeof open>>, buf: Buffer): Promise<{ bytesRead: number }> {
  let total = 0;
  while (total < buf.length) {
    const { bytesRead } = await handle.read(buf, total, buf.length - total, null);
    if (bytesRead === 0) break;
    total += bytesRead;
  }
  return { bytesRead: total };
}
