/**
 * A checkpoint's files crossing between VM hosts: the sparse frames they travel as, read as
 * hostile input, and the import that takes only what matches the digests of the capture.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VesselError } from '../../src/core/errors.js';
import type { RemoteCheckpoint } from '../../src/core/ports.js';
import { importCheckpoint } from '../../src/vm/checkpoint-import.js';
import { DiskLayers, MANIFEST_VERSION, type CheckpointManifest } from '../../src/vm/disk-layers.js';
import { digestFile } from '../../src/vm/file-digest.js';
import { SparseStreamError, sparseFrames, writeSparseFrames } from '../../src/vm/sparse-stream.js';

const MiB = 1024 * 1024;
const root = mkdtempSync(join(tmpdir(), 'vessel-move-'));
after(() => rmSync(root, { recursive: true, force: true }));
let n = 0;
const scratch = (name: string) => join(root, `${++n}-${name}`);

async function collect(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of stream) parts.push(p);
  return Buffer.concat(parts);
}

/** A file of 1 MiB chunks: data, zeros, data, and a short tail. */
function sampleFile(): string {
  const path = scratch('sample');
  const data = Buffer.alloc(3 * MiB + 1234);
  data.fill(7, 0, MiB);
  data.fill(9, 2 * MiB, 3 * MiB);
  data.fill(1, 3 * MiB);
  writeFileSync(path, data);
  return path;
}

async function* slices(bytes: Buffer, size: number): AsyncIterable<Buffer> {
  for (let i = 0; i < bytes.length; i += size) yield bytes.subarray(i, i + size);
}

test('frames carry a file whole, with its zero chunks as holes, however the stream is sliced', async () => {
  const from = sampleFile();
  const frames = await collect(sparseFrames(from));
  assert.ok(frames.length < 2 * MiB + 1234 + 100, `the zero chunk is not sent (${frames.length} bytes of frames)`);
  for (const size of [7, 4096, 65536, 3 * MiB]) {
    const to = scratch('copy');
    const digest = await writeSparseFrames(slices(frames, size), to, 4 * MiB);
    assert.deepEqual(readFileSync(to), readFileSync(from));
    assert.equal(digest, await digestFile(from));
    assert.ok(statSync(to).blocks * 512 < statSync(to).size, 'the hole stays a hole');
  }
});

test('a stream that is cut, oversized, malformed or runs on is refused', async () => {
  const frames = await collect(sparseFrames(sampleFile()));
  const refused = async (input: Buffer, bound: number, why: RegExp) => {
    await assert.rejects(writeSparseFrames(slices(input, 65536), scratch('bad'), bound), (err: Error) => err instanceof SparseStreamError && why.test(err.message));
  };
  await refused(frames.subarray(0, frames.length - 5), 4 * MiB, /before its end frame/);
  await refused(frames.subarray(0, 1000), 4 * MiB, /before its end frame/);
  await refused(frames, 2 * MiB, /over its bound/);
  await refused(Buffer.concat([frames, Buffer.from([1])]), 4 * MiB, /after the end frame/);
  await refused(Buffer.from([9, 0, 0, 0, 0]), 4 * MiB, /unknown frame kind/);
  // A length over a chunk is refused from its header, before any of its bytes are awaited.
  await refused(Buffer.from([1, 0xff, 0xff, 0xff, 0xff]), 4 * MiB, /over the 1048576-byte chunk/);
});

/** A checkpoint as a capture leaves it: a layer below (the template's), its own layer, state and RAM, and the manifest. */
async function capturedCheckpoint(layers: DiskLayers): Promise<{ id: string; manifest: CheckpointManifest }> {
  const [id, base] = [randomUUID(), randomUUID()];
  writeFileSync(layers.layerFile(base), Buffer.alloc(2 * MiB, 3));
  writeFileSync(layers.layerFile(id), Buffer.alloc(MiB + 17, 4));
  mkdirSync(layers.checkpointDir(id));
  writeFileSync(join(layers.checkpointDir(id), 'state'), Buffer.alloc(300_000, 5));
  const ram = Buffer.alloc(8 * MiB);
  ram.fill(6, 5 * MiB, 6 * MiB);
  writeFileSync(join(layers.checkpointDir(id), 'ram'), ram);
  const manifest: CheckpointManifest = {
    version: MANIFEST_VERSION,
    chain: [id, base],
    hasRam: true,
    memoryMib: 8,
    vcpus: 1,
    diskSizeBytes: 4 * MiB,
    balloonMib: 8,
    qemuVersion: 'QEMU 10.0.2',
    digests: {
      state: await digestFile(join(layers.checkpointDir(id), 'state')),
      ram: await digestFile(join(layers.checkpointDir(id), 'ram')),
      layers: { [id]: await digestFile(layers.layerFile(id)), [base]: await digestFile(layers.layerFile(base)) },
    },
  };
  writeFileSync(layers.manifestFile(id), JSON.stringify(manifest));
  return { id, manifest };
}

/** What the holding host serves, with what a test changes on the way. */
function sourceOf(layers: DiskLayers, id: string, manifest: unknown, opts: { image?: string; tamper?: string; served?: string[] } = {}): RemoteCheckpoint {
  return {
    description: { manifest, image: opts.image ?? 'image-1', files: [] },
    open: async (file) => {
      opts.served?.push(file);
      const path = file === 'state' || file === 'ram' ? join(layers.checkpointDir(id), file) : layers.layerFile(file);
      if (file !== opts.tamper) return sparseFrames(path);
      const bytes = readFileSync(path);
      bytes[bytes.length - 1] ^= 1;
      const copy = scratch('tampered');
      writeFileSync(copy, bytes);
      return sparseFrames(copy);
    },
  };
}

const importInto = (layers: DiskLayers, id: string, source: RemoteCheckpoint) =>
  importCheckpoint({ checkpointId: id, source, layers, qemuVersion: 'QEMU 10.0.2', imageDigest: 'image-1', layerVerified: () => false, expected: { memoryMib: 8, vcpus: 1 } });

test('an import takes every file byte for byte, manifest last, and reuses a layer it holds', async () => {
  const a = new DiskLayers(scratch('host-a'));
  const b = new DiskLayers(scratch('host-b'));
  const { id, manifest } = await capturedCheckpoint(a);
  await importInto(b, id, sourceOf(a, id, manifest));
  for (const f of ['state', 'ram']) assert.deepEqual(readFileSync(join(b.checkpointDir(id), f)), readFileSync(join(a.checkpointDir(id), f)));
  for (const layer of manifest.chain) {
    assert.deepEqual(readFileSync(b.layerFile(layer)), readFileSync(a.layerFile(layer)));
    assert.equal(b.readLayerDigest(layer), manifest.digests.layers[layer]);
    assert.equal(statSync(b.layerFile(layer)).mode & 0o777, 0o400, 'sealed');
  }
  assert.deepEqual(b.readManifest(id), { manifest });
  assert.deepEqual(b.collect(), [], 'the manifest holds its layers');

  // A second checkpoint on the same template layer: that layer is not sent again.
  const second = randomUUID();
  const base = manifest.chain[1]!;
  writeFileSync(a.layerFile(second), Buffer.alloc(MiB, 8));
  mkdirSync(a.checkpointDir(second));
  writeFileSync(join(a.checkpointDir(second), 'state'), Buffer.alloc(1000, 1));
  const m2: CheckpointManifest = {
    ...manifest,
    chain: [second, base],
    hasRam: false,
    digests: { state: await digestFile(join(a.checkpointDir(second), 'state')), ram: null, layers: { [second]: await digestFile(a.layerFile(second)), [base]: manifest.digests.layers[base]! } },
  };
  const served: string[] = [];
  await importInto(b, second, sourceOf(a, second, m2, { served }));
  assert.deepEqual(served, [second, 'state'], 'the layer it holds and the RAM it has none of are not asked for');
});

test('a file that differs from its digest, another image or QEMU, or a bad manifest leaves nothing behind', async () => {
  const a = new DiskLayers(scratch('host-a'));
  const { id, manifest } = await capturedCheckpoint(a);
  const refusedBy = async (source: RemoteCheckpoint, why: RegExp, opts: { qemu?: string; memoryMib?: number } = {}) => {
    const b = new DiskLayers(scratch('host-b'));
    const expected = { memoryMib: opts.memoryMib ?? 8, vcpus: 1 };
    await assert.rejects(
      importCheckpoint({ checkpointId: id, source, layers: b, qemuVersion: opts.qemu ?? 'QEMU 10.0.2', imageDigest: 'image-1', layerVerified: () => false, expected }),
      (err: Error) => err instanceof VesselError && err.code === 'failed_precondition' && why.test(err.message),
    );
    assert.equal(existsSync(b.checkpointDir(id)), false, 'no directory of it is left');
    b.collect();
    assert.deepEqual(readdirSync(b.layersDir), [], 'the layers it took are collected');
  };
  await refusedBy(sourceOf(a, id, manifest, { tamper: 'ram' }), /ram file arrived different/);
  await refusedBy(sourceOf(a, id, manifest, { tamper: manifest.chain[1] }), /disk layer .* arrived different/);
  await refusedBy(sourceOf(a, id, manifest, { tamper: 'state' }), /state file arrived different/);
  await refusedBy(sourceOf(a, id, manifest, { image: 'image-2' }), /guest image whose files differ/);
  await refusedBy(sourceOf(a, id, manifest), /made by QEMU 10.0.2, and this host runs QEMU 9/, { qemu: 'QEMU 9.2.0' });
  await refusedBy(sourceOf(a, id, { ...manifest, chain: ['../../etc/passwd'] }), /manifest is damaged/);
  // The peer's manifest sets the bounds and the forks' size: it must be what the store counted.
  await refusedBy(sourceOf(a, id, { ...manifest, memoryMib: 64 }), /manifest's memory size is not what the store records/);
  await refusedBy(sourceOf(a, id, { ...manifest, vcpus: 2 }), /manifest's vCPU count/);
  await refusedBy(sourceOf(a, id, { ...manifest, hasRam: false }), /manifest's RAM file/);
  await refusedBy(sourceOf(a, id, { ...manifest, chain: [...manifest.chain].reverse() }), /manifest's top disk layer/);
  await refusedBy(sourceOf(a, id, { ...manifest, memoryMib: 1 }), /ram file arrived malformed: .*over its bound/, { memoryMib: 1 });
});
