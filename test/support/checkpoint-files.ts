/** A checkpoint's files as the tests see them on disk, independently of the service's own digests. */
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/** Its own files and every disk layer of its chain. */
export function checkpointFiles(dataDir: string, cpId: string): string[] {
  const dir = join(dataDir, 'checkpoints', cpId);
  const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8')) as { chain: string[] };
  return [...readdirSync(dir).map((f) => join(dir, f)), ...manifest.chain.map((l) => join(dataDir, 'layers', `${l}.qcow2`))];
}

/** SHA-256 of each of them. */
export function fingerprint(dataDir: string, cpId: string): Record<string, string> {
  return Object.fromEntries(checkpointFiles(dataDir, cpId).map((f) => [f, createHash('sha256').update(readFileSync(f)).digest('hex')]));
}
