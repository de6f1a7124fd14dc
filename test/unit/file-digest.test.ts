/** Checkpoint file digests: the same whatever the chunking, sensitive to every byte, and the sparse copy is exact. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { ChunkedDigest, copySparseWithDigest, digestFile } from '../../src/vm/file-digest.js';

const MiB = 1024 * 1024;

/** Data with whole zero MiBs, random MiBs and a ragged tail. */
function sample(seed: number): Buffer {
  const parts: Buffer[] = [];
  for (let i = 0; i < 5; i++) parts.push((seed >> i) & 1 ? Buffer.alloc(MiB, (seed + i) & 255) : Buffer.alloc(MiB));
  parts.push(Buffer.alloc(seed % 4096, 7));
  return Buffer.concat(parts);
}

test('a digest does not depend on how the stream was cut, and the file digest agrees', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-digest-'));
  try {
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 1 << 20 }), fc.array(fc.integer({ min: 1, max: 3 * MiB }), { maxLength: 8 }), async (seed, cuts) => {
        const data = sample(seed);
        const d = new ChunkedDigest();
        let at = 0;
        for (const cut of cuts) {
          d.update(data.subarray(at, Math.min(data.length, at + cut)));
          at = Math.min(data.length, at + cut);
        }
        d.update(data.subarray(at));
        const file = join(dir, `f${seed}`);
        writeFileSync(file, data);
        assert.equal(d.digest(), await digestFile(file));
        rmSync(file);
      }),
      { numRuns: 25 },
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('one changed byte, or one more zero byte, changes the digest', async () => {
  const a = new ChunkedDigest();
  a.update(Buffer.alloc(2 * MiB));
  const b = new ChunkedDigest();
  const flipped = Buffer.alloc(2 * MiB);
  flipped[MiB + 17] = 1;
  b.update(flipped);
  const c = new ChunkedDigest();
  c.update(Buffer.alloc(2 * MiB + 1));
  assert.equal(new Set([a.digest(), b.digest(), c.digest()]).size, 3);
});

test('the sparse copy is byte for byte the source, leaves zero chunks as holes, and returns its digest', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-digest-'));
  try {
    const data = Buffer.concat([Buffer.alloc(8 * MiB), Buffer.alloc(MiB, 3), Buffer.alloc(8 * MiB), Buffer.alloc(100, 9)]);
    writeFileSync(join(dir, 'src'), data);
    const digest = await copySparseWithDigest(join(dir, 'src'), join(dir, 'dst'));
    assert.ok(readFileSync(join(dir, 'dst')).equals(data));
    assert.equal(digest, await digestFile(join(dir, 'src')));
    assert.ok(statSync(join(dir, 'dst')).blocks * 512 < 2 * MiB, 'the zeros take no space');
    await assert.rejects(copySparseWithDigest(join(dir, 'src'), join(dir, 'dst')), /EEXIST/, 'it never writes over a file');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
