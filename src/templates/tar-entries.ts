/**
 * The entries of a tar stream, one at a time, with node-tar's parser (gzip is recognized by its
 * magic bytes). The parser is strict: a damaged header or checksum is an error, not a skipped
 * entry. Metadata entries (PAX headers, GNU long names) are bounded; the caller bounds the rest
 * (entry count, sizes) as it reads, since it decides what an entry may be.
 *
 * The caller must read each entry's body to its end (or `resume()` it) before asking for the
 * next: the parser waits for that, so a stream is never held in memory beyond one chunk.
 */
import type { Readable } from 'node:stream';
import { Parser, type ReadEntry } from 'tar';

/** A PAX header or long name larger than this is refused (paths are at most 4 KiB anyway). */
const MAX_META_ENTRY_BYTES = 64 * 1024;

export class TarError extends Error {}

export async function* tarEntries(source: Readable): AsyncGenerator<ReadEntry> {
  const parser = new Parser({ strict: true, maxMetaEntrySize: MAX_META_ENTRY_BYTES });
  const queue: ReadEntry[] = [];
  // One object: TypeScript would narrow plain locals that only callbacks assign.
  const state: { failure: Error | null; ended: boolean } = { failure: null, ended: false };
  let wake: (() => void) | null = null;
  const notify = () => {
    const w = wake;
    wake = null;
    w?.();
  };
  parser.on('entry', (entry: ReadEntry) => {
    queue.push(entry);
    notify();
  });
  parser.on('error', (err: Error) => {
    state.failure ??= new TarError(`not a valid tar stream: ${err.message}`);
    notify();
  });
  parser.on('end', () => {
    state.ended = true;
    notify();
  });
  const waitDrain = () =>
    new Promise<void>((resolve) => {
      const done = () => {
        parser.off('drain', done);
        source.off('close', done);
        resolve();
      };
      parser.once('drain', done);
      // An abandoned read must not leave this waiting for a drain that never comes.
      source.once('close', done);
    });
  const pump = (async () => {
    try {
      for await (const chunk of source) {
        if (state.failure !== null) break;
        if (!parser.write(chunk as Buffer)) await waitDrain();
      }
      if (state.failure === null) parser.end();
    } catch (err) {
      state.failure ??= err as Error;
      notify();
    }
  })();
  try {
    for (;;) {
      if (state.failure !== null) throw state.failure;
      const entry = queue.shift();
      if (entry !== undefined) {
        yield entry;
        continue;
      }
      if (state.ended) break;
      await new Promise<void>((resolve) => (wake = resolve));
    }
  } finally {
    source.destroy();
    await pump;
  }
}
