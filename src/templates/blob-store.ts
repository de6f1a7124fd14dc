/**
 * File contents by their SHA-256, in a directory of the service's own. Contents from a build
 * context or an image layer land here under names we make (`sha256-<hex>`), never under a path
 * that came with them: what the input names stays data in a FileTree (file-tree.ts).
 */
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { chmodSync, constants, createWriteStream, linkSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';

export class BlobStore {
  constructor(readonly dir: string) {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
  }

  path(digest: string): string {
    if (!/^sha256:[0-9a-f]{64}$/.test(digest)) throw new Error(`not a sha256 digest: ${digest}`);
    return join(this.dir, digest.replace(':', '-'));
  }

  has(digest: string): boolean {
    try {
      return statSync(this.path(digest)).isFile();
    } catch {
      return false;
    }
  }

  read(digest: string): Buffer {
    return readFileSync(this.path(digest));
  }

  /**
   * Stores exactly `size` bytes of `source` (a tar entry's body: its size is in its header) and
   * returns their digest. Written under a fresh name (O_EXCL) and linked to its digest's name; a
   * content already stored is kept as it is.
   */
  async put(source: AsyncIterable<Buffer>, size: number): Promise<string> {
    const tmp = join(this.dir, `tmp-${randomBytes(8).toString('hex')}`);
    const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
    const out = createWriteStream('', { fd });
    const hash = createHash('sha256');
    let written = 0;
    try {
      for await (const chunk of source) {
        written += chunk.length;
        if (written > size) throw new Error(`an entry holds more than the ${size} bytes its header says`);
        hash.update(chunk);
        if (!out.write(chunk)) await once(out, 'drain');
      }
      if (written !== size) throw new Error(`an entry ends after ${written} of the ${size} bytes its header says`);
      out.end();
      await once(out, 'finish');
      const digest = `sha256:${hash.digest('hex')}`;
      try {
        linkSync(tmp, this.path(digest));
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      }
      return digest;
    } finally {
      out.destroy();
      rmSync(tmp, { force: true });
    }
  }

  /** Removes every stored content not in `keep`. */
  retain(keep: Set<string>): void {
    for (const f of readdirSync(this.dir)) {
      const digest = f.replace(/^sha256-/, 'sha256:');
      if (!keep.has(digest)) unlinkSync(join(this.dir, f));
    }
  }
}
