/**
 * Disk a tenant holds beyond its checkpoints' sizes: the layers of deleted checkpoints that its
 * runtimes or remaining checkpoints still stand on, each counted once.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DiskLayers } from '../../src/vm/disk-layers.js';
import { writeVmState } from '../../src/vm/vm-state.js';

const dataDir = mkdtempSync(join(tmpdir(), 'vessel-layers-'));
after(() => rmSync(dataDir, { recursive: true, force: true }));

test('only layers whose checkpoint is gone count, once each, for whoever stands on them', () => {
  const layers = new DiskLayers(dataDir);
  const [deleted, alive, deletedUnderCheckpoint, unrelated] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
  for (const [id, mib] of [[deleted, 3], [alive, 5], [deletedUnderCheckpoint, 7], [unrelated, 11]] as const) {
    writeFileSync(layers.layerFile(id), Buffer.alloc(mib * 1024 * 1024, 1));
  }
  const size = (id: string) => statSync(layers.layerFile(id)).blocks * 512;
  // Two runtimes on the same deleted layer, one of them on a live checkpoint's layer above it.
  for (const [rt, chain] of [['rt-a', [alive, deleted]], ['rt-b', [deleted]]] as const) {
    mkdirSync(join(layers.runtimesDir, rt));
    writeVmState(join(layers.runtimesDir, rt), { uid: 200_001, memoryMib: 512, vcpus: 1, tap: null, disk: 0, chain: [...chain], ram: 'shared', diskSizeBytes: 1 << 30 });
  }
  mkdirSync(layers.checkpointDir(alive));
  // A checkpoint standing on a deleted one's layer.
  const child = randomUUID();
  mkdirSync(layers.checkpointDir(child));
  writeFileSync(layers.manifestFile(child), JSON.stringify({ chain: [child, deletedUnderCheckpoint] }));

  assert.equal(layers.bytesOfOrphanedLayers(['rt-a', 'rt-b'], []), size(deleted), 'shared by two runtimes, counted once; a live checkpoint counts itself');
  assert.equal(layers.bytesOfOrphanedLayers([], [child]), size(deletedUnderCheckpoint));
  assert.equal(layers.bytesOfOrphanedLayers(['rt-a', 'no-vm-yet'], [child]), size(deleted) + size(deletedUnderCheckpoint));
  assert.equal(layers.bytesOfOrphanedLayers([], []), 0, `nothing stands on ${unrelated}: it is not anyone's`);
});
