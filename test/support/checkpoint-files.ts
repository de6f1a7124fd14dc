/** A checkpoint's files as the tests see them on disk, independently of the service's own digests. */
import { createHash } from 'node:crypto';
import { closeSync, openSync, readFileSync, readSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** Its own files and every disk layer of its chain. */
export function checkpointFiles(dataDir: string, cpId: string): string[] {
  const dir = join(dataDir, 'checkpoints', cpId);
  const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { chain: string[] };
  return [...readdirSync(dir).map((f) => join(dir, f)), ...manifest.chain.map((l) => join(dataDir, 'layers', `${l}.qcow2`))];
}

const CHUNK = Buffer.allocUnsafe(4 << 20);

/**
 * SHA-256 of a whole file, read through one reused 4 MiB buffer: a checkpoint's RAM file is as
 * large as the guest's memory, and reading it whole (readFileSync) allocates and zero-fills that
 * much on every call, which cost several times the hashing itself.
 */
function sha256(file: string): string {
  const hash = createHash('sha256');
  const fd = openSync(file, 'r');
  try {
    for (let n = readSync(fd, CHUNK, 0, CHUNK.length, null); n > 0; n = readSync(fd, CHUNK, 0, CHUNK.length, null)) hash.update(CHUNK.subarray(0, n));
  } finally {
    closeSync(fd);
  }
  return hash.digest('hex');
}

/** SHA-256 of each of them. */
export function fingerprint(dataDir: string, cpId: string): Record<string, string> {
  return Object.fromEntries(checkpointFiles(dataDir, cpId).map((f) => [f, sha256(f)]));
}
