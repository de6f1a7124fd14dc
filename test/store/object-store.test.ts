/**
 * Checkpoints in object storage against a real S3 server: Ceph's RADOS Gateway on a throwaway
 * single-node cluster (test/support/ceph-rgw.ts). A checkpoint as a capture leaves it is
 * uploaded as content-addressed chunks, deduplicated, read back through the very import a move
 * between hosts uses (so each file is checked against its capture's digest), and a chunk that
 * was changed or removed in the bucket, or a record that is not the one stored, is refused.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteObjectCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { Core } from '../../src/core/core.js';
import { VesselError, unavailable } from '../../src/core/errors.js';
import { SecretBox } from '../../src/core/secret-box.js';
import type { Checkpoint } from '../../src/core/types.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';
import type { RemoteCheckpoint } from '../../src/core/ports.js';
import { ObjectCheckpointArchive } from '../../src/objects/checkpoint-archive.js';
import { CHUNK_BYTES, ObjectStoreError } from '../../src/objects/chunk-store.js';
import { importCheckpoint } from '../../src/vm/checkpoint-import.js';
import { DiskLayers, MANIFEST_VERSION, type CheckpointManifest } from '../../src/vm/disk-layers.js';
import { digestFile } from '../../src/vm/file-digest.js';
import { sparseFrames } from '../../src/vm/sparse-stream.js';
import { startRadosGateway, type S3Server } from '../support/ceph-rgw.js';

const MiB = 1024 * 1024;
const root = mkdtempSync(join(tmpdir(), 'vessel-objects-'));
let n = 0;
const scratch = (name: string) => join(root, `${++n}-${name}`);

let server: S3Server;
let archive: ObjectCheckpointArchive;
let raw: S3Client;
const bucket = 'vessel-test';

before(async () => {
  server = await startRadosGateway();
  const credentials = { accessKeyId: server.accessKeyId, secretAccessKey: server.secretAccessKey };
  archive = new ObjectCheckpointArchive({ endpoint: server.endpoint, bucket, region: 'us-east-1', credentials });
  await archive.chunks.ensureBucket();
  raw = new S3Client({ endpoint: server.endpoint, region: 'us-east-1', forcePathStyle: true, credentials, requestChecksumCalculation: 'WHEN_REQUIRED' });
});
after(() => {
  archive?.close();
  raw?.destroy();
  server?.stop();
  rmSync(root, { recursive: true, force: true });
});

async function collect(stream: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const p of stream) parts.push(p);
  return Buffer.concat(parts);
}

async function* once(bytes: Buffer): AsyncIterable<Buffer> {
  // In pieces that do not line up with chunks, as a network stream's do.
  for (let i = 0; i < bytes.length; i += 65_537) yield bytes.subarray(i, i + 65_537);
}

/** A checkpoint as a capture leaves it: its layer on a template's, state, RAM with data amid zeros, and the manifest. */
async function capturedCheckpoint(layers: DiskLayers, base: string): Promise<{ id: string; manifest: CheckpointManifest; source: RemoteCheckpoint }> {
  const id = randomUUID();
  if (!existsSync(layers.layerFile(base))) writeFileSync(layers.layerFile(base), randomBytes(9 * MiB));
  writeFileSync(layers.layerFile(id), randomBytes(MiB + 17));
  mkdirSync(layers.checkpointDir(id));
  writeFileSync(join(layers.checkpointDir(id), 'state'), randomBytes(300_000));
  const ram = Buffer.alloc(16 * MiB);
  randomBytes(MiB).copy(ram, 5 * MiB);
  writeFileSync(join(layers.checkpointDir(id), 'ram'), ram);
  const manifest: CheckpointManifest = {
    version: MANIFEST_VERSION,
    chain: [id, base],
    hasRam: true,
    memoryMib: 16,
    vcpus: 1,
    diskSizeBytes: 16 * MiB,
    balloonMib: 16,
    qemuVersion: 'QEMU 10.0.2',
    digests: {
      state: await digestFile(join(layers.checkpointDir(id), 'state')),
      ram: await digestFile(join(layers.checkpointDir(id), 'ram')),
      layers: { [id]: await digestFile(layers.layerFile(id)), [base]: await digestFile(layers.layerFile(base)) },
    },
  };
  // What the holding host's driver offers: the description and each file's frames.
  const source: RemoteCheckpoint = {
    description: { manifest, image: 'image-1', files: [id, base, 'state', 'ram'] },
    open: async (file) => sparseFrames(file === 'state' || file === 'ram' ? join(layers.checkpointDir(id), file) : layers.layerFile(file)),
  };
  return { id, manifest, source };
}

const importInto = (layers: DiskLayers, id: string, source: RemoteCheckpoint) =>
  importCheckpoint({ checkpointId: id, source, layers, qemuVersion: 'QEMU 10.0.2', imageDigest: 'image-1', layerVerified: () => false, expected: { memoryMib: 16, vcpus: 1 } });

test('a file is stored as content-addressed chunks: one that is in the bucket already is not sent again', async () => {
  const unique = randomBytes(2 * CHUNK_BYTES + 1000);
  const first = await archive.chunks.putFile(once(unique));
  assert.equal(first.bytes, unique.length);
  assert.equal(first.chunks.length, 3);
  assert.equal(first.sent, 3);
  const again = await archive.chunks.putFile(once(unique));
  assert.deepEqual({ ...again, sent: 0 }, again, 'an upload done again sends nothing');
  assert.deepEqual(again.chunks, first.chunks);
  // Two equal chunks in one file, and one shared with the first file: one chunk sent.
  const repeated = Buffer.concat([unique.subarray(0, CHUNK_BYTES), unique.subarray(0, CHUNK_BYTES), randomBytes(10)]);
  const third = await archive.chunks.putFile(once(repeated));
  assert.equal(third.chunks[0], first.chunks[0]);
  assert.equal(third.chunks[1], first.chunks[0]);
  assert.equal(third.sent, 1);
  assert.deepEqual(await collect(archive.chunks.openFile(third)), repeated);
  assert.deepEqual(await collect(archive.chunks.openFile(first)), unique);
});

test('a checkpoint uploaded and imported on another host is byte for byte what was captured', async () => {
  const a = new DiskLayers(scratch('host-a'));
  const base = randomUUID();
  const { id, manifest, source } = await capturedCheckpoint(a, base);
  const digest = await archive.upload(id, source);
  assert.match(digest, /^[0-9a-f]{64}$/);
  assert.equal(await archive.upload(id, source), digest, 'an upload done again (a restart mid-way) stores the same record');

  const b = new DiskLayers(scratch('host-b'));
  await importInto(b, id, await archive.open(id, digest));
  for (const f of ['state', 'ram']) assert.deepEqual(readFileSync(join(b.checkpointDir(id), f)), readFileSync(join(a.checkpointDir(id), f)));
  for (const layer of manifest.chain) assert.deepEqual(readFileSync(b.layerFile(layer)), readFileSync(a.layerFile(layer)));
  assert.deepEqual(b.readManifest(id), { manifest });

  // A second checkpoint on the same template layer: that layer's chunks are in the bucket already.
  const second = await capturedCheckpoint(a, base);
  const sent: number[] = [];
  const counting: RemoteCheckpoint = {
    description: second.source.description,
    open: async (file) => {
      const stored = await archive.chunks.putFile(await second.source.open(file));
      sent.push(stored.sent);
      return sparseFrames(file === 'state' || file === 'ram' ? join(a.checkpointDir(second.id), file) : a.layerFile(file));
    },
  };
  await archive.upload(second.id, counting);
  assert.equal(sent[1], 0, 'the shared template layer sent no chunk');
  assert.ok(sent[0]! > 0 && sent[2]! > 0, 'the new layer and state were sent');
});

test('a chunk changed or removed in the bucket, or a record not the one stored, is refused and leaves nothing', async () => {
  const a = new DiskLayers(scratch('host-a'));
  const { id, source } = await capturedCheckpoint(a, randomUUID());
  const digest = await archive.upload(id, source);
  const record = await archive.open(id, digest);
  const ramChunk = (await archive.chunks.putFile(await source.open('ram'))).chunks[0]!;
  const key = `chunks/${ramChunk}`;
  const stored = await archive.chunks.getSmall(key, CHUNK_BYTES);
  assert.ok(stored !== null);

  const refused = async (why: RegExp, kind: 'corrupt' | 'missing') => {
    const b = new DiskLayers(scratch('host-b'));
    await assert.rejects(importInto(b, id, await archive.open(id, digest)), (err: Error) => err instanceof VesselError && err.code === 'failed_precondition' && err instanceof ObjectStoreError && err.kind === kind && why.test(err.message));
    assert.equal(existsSync(b.checkpointDir(id)), false, 'nothing of it is left');
  };
  const flipped = Buffer.from(stored);
  flipped[flipped.length - 1]! ^= 1;
  await raw.send(new PutObjectCommand({ Bucket: bucket, Key: key, Body: flipped }));
  await refused(new RegExp(`chunk ${ramChunk} .* differs from its digest`), 'corrupt');
  await raw.send(new DeleteObjectCommand({ Bucket: bucket, Key: key }));
  await refused(new RegExp(`chunk ${ramChunk} is not in bucket`), 'missing');
  assert.equal(await archive.chunks.hasChunk(ramChunk), false);
  // An upload done again puts back what is missing.
  await archive.upload(id, source);
  await importInto(new DiskLayers(scratch('host-c')), id, record);

  // The record is checked against the digest the store keeps: one rewritten in the bucket is not read.
  await raw.send(new PutObjectCommand({ Bucket: bucket, Key: `checkpoints/${id}.json`, Body: Buffer.from('{}') }));
  await assert.rejects(archive.open(id, digest), (err: Error) => err instanceof ObjectStoreError && err.kind === 'corrupt' && /is not the one stored/.test(err.message));
  await archive.forget(id);
  await assert.rejects(archive.open(id, digest), (err: Error) => err instanceof ObjectStoreError && err.kind === 'missing');
});

test('a checkpoint ready on one VM host is uploaded; with that host gone, another host takes it from object storage', async () => {
  const dir = scratch('fleet');
  mkdirSync(dir);
  const store = new SqliteStore(join(dir, 'vessel.db'));
  const [driverA, driverB] = [new FakeDriver(), new FakeDriver()];
  const host = (driver: FakeDriver, node: string) =>
    new Core({ store, driver, gateway: new FakeGateway(), secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: ROOMY_TENANT_LIMITS, node, archive });
  const row = (displayName: string): Checkpoint => ({
    id: randomUUID(),
    tenantId: 'acme',
    displayName,
    state: 'ready',
    stateMessage: null,
    resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 },
    sourceRuntimeId: null,
    templateId: null,
    parentCheckpointId: null,
    deleted: false,
    diskBytes: 1000,
    node: 'host-a',
    createdAt: new Date().toISOString(),
  });
  try {
    const [a, b] = [host(driverA, 'host-a'), host(driverB, 'host-b')];
    const cp = row('kept');
    await store.checkpoints.insert(cp);
    driverA.checkpoints.add(cp.id);
    // A start takes up what is pending: this one was ready before any upload began.
    await a.reconcile();
    await a.uploadsSettled();
    const digest = await store.checkpoints.archiveDigest(cp.id);
    assert.ok(digest !== null, 'the store records it as stored');
    assert.deepEqual(await store.checkpoints.listUnarchived('host-a'), []);

    // Host a is gone (its files with it): host b's move cannot reach it, and restores from the bucket.
    const gone = async (): Promise<RemoteCheckpoint> => {
      throw unavailable("VM host 'host-a', which holds the checkpoint's files, holds no lease");
    };
    // As the hop fails when the holder's lease still runs but its process is gone.
    const refused = async (): Promise<RemoteCheckpoint> => {
      throw new Error('connect ECONNREFUSED 127.0.0.1:8082');
    };
    const moved = await b.checkpoints.moveHere('acme', cp.id, refused);
    assert.deepEqual([moved.from, moved.checkpoint.node], ['host-a', 'host-b']);
    assert.ok(driverB.checkpoints.has(cp.id));
    assert.deepEqual(driverB.importedShapes.get(cp.id), { memoryMib: 512, vcpus: 1 });

    // One never uploaded cannot come back: the host's absence is the answer.
    const lost = row('lost');
    await store.checkpoints.insert(lost);
    await assert.rejects(b.checkpoints.moveHere('acme', lost.id, gone), (err: Error) => err instanceof VesselError && err.code === 'unavailable' && /holds no lease/.test(err.message));

    // Deleted, it leaves the bucket's record behind it.
    await b.checkpoints.delete('acme', cp.id);
    await assert.rejects(archive.open(cp.id, digest), (err: Error) => err instanceof ObjectStoreError && err.kind === 'missing');
  } finally {
    await store.close();
  }
});
