/**
 * Capturing a running or paused VM into a checkpoint: its disk frozen into a layer, its device
 * state (and RAM, when that is a private mapping) saved through migration, its own RAM file
 * copied (all while the VM is paused), then every file digested, flushed and sealed, the
 * manifest written last (while it runs again).
 *
 * The disk switch comes first and is recorded at once (`recordState`), so a failure after it
 * leaves the runtime on its new overlay, unharmed; only the checkpoint's own files are removed
 * by the caller.
 */
import { closeSync, linkSync, mkdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { flushFiles, fsyncDir, fsyncFile, writeFileDurably } from '../platform/durable-files.js';
import { DiskLayers, MANIFEST_VERSION, createOverlay, sealFile, type CheckpointManifest } from './disk-layers.js';
import { ChunkedDigest, copySparseWithDigest, digestFile } from './file-digest.js';
import { migrateToFile } from './migration.js';
import type { QemuVm } from './qemu-vm.js';
import { diskFdset, openForQemu } from './vm-launcher.js';
import { diskFileOf, diskNodeOf, type VmState } from './vm-state.js';

export interface CaptureRequest {
  vm: QemuVm;
  /** The runtime's directory and its state as it is now. */
  dir: string;
  state: VmState;
  checkpointId: string;
  layers: DiskLayers;
  qemuVersion: string;
  /** Writes the runtime's new state (its disk now sits on the new layer) durably. */
  recordState(next: VmState): void;
}

export interface Capture {
  manifest: CheckpointManifest;
  /** The disk space the checkpoint's own files take. */
  bytes: number;
}

/** What is captured while the VM is paused; `finish` completes the checkpoint while it runs again. */
export interface PausedCapture {
  /** Digests, flushes and seals the files, then writes the manifest: the checkpoint is complete. */
  finish(): Promise<Capture>;
}

/**
 * Captures the paused VM: its disk switched onto a new overlay, its device state (and private
 * RAM) streamed out, its shared RAM copied. That is all that needs the VM paused; the caller puts
 * it back to running and calls `finish`, which touches only files QEMU no longer writes.
 */
export async function captureCheckpoint(c: CaptureRequest): Promise<PausedCapture> {
  const { vm, dir, state, checkpointId, layers } = c;
  const cpDir = layers.checkpointDir(checkpointId);
  mkdirSync(cpDir, { recursive: true, mode: 0o700 });
  fsyncDir(layers.checkpointsDir);
  const layer = layers.layerFile(checkpointId);
  const next = await switchDisk(c, layer);

  // The device state is digested on its way to the file, the RAM file as it is copied: nothing is read twice.
  const stateFile = join(cpDir, 'state');
  const stateDigest = new ChunkedDigest();
  await migrateToFile(vm.qmp, stateFile, stateDigest);
  const ramFile = join(cpDir, 'ram');
  const ramDigest = state.ram === 'shared' ? await copySparseWithDigest(join(dir, 'ram'), ramFile) : null;

  return {
    finish: async () => {
      const layerDigest = await digestFile(layer);
      writeFileDurably(layers.layerDigestFile(checkpointId), `${layerDigest}\n`, 0o400);
      // The layer too: the guest's writes since its last flush are in it, only in the page cache.
      const own = ramDigest === null ? [stateFile] : [stateFile, ramFile];
      await flushFiles([...own, layer]);
      for (const f of own) sealFile(f);
      fsyncDir(cpDir);

      const manifest: CheckpointManifest = {
        version: MANIFEST_VERSION,
        chain: next.chain,
        ...(state.base === undefined ? {} : { base: state.base }),
        hasRam: state.ram === 'shared',
        memoryMib: state.memoryMib,
        vcpus: state.vcpus,
        diskSizeBytes: state.diskSizeBytes,
        balloonMib: state.balloonMib ?? state.memoryMib,
        qemuVersion: c.qemuVersion,
        digests: { state: stateDigest.digest(), ram: ramDigest, layers: { [checkpointId]: layerDigest, ...chainDigests(layers, state.chain) } },
      };
      // Last: a checkpoint without its manifest is not complete.
      layers.writeManifest(checkpointId, manifest);
      return { manifest, bytes: [stateFile, ramFile, layer].reduce((sum, f) => sum + allocatedBytes(f), 0) };
    },
  };
}

/**
 * Freezes the current overlay as the checkpoint's layer and puts the VM on a new overlay above
 * it: the old overlay is hard-linked into the layers, the new one is made and handed to QEMU as
 * descriptors (`add-fd`), `blockdev-snapshot` switches to it (QEMU reopens the old one read-only
 * from its fd set), and the old set, which held a read-write descriptor, is dropped. The layer
 * is sealed once QEMU holds it read-only.
 */
async function switchDisk(c: CaptureRequest, layer: string): Promise<VmState> {
  const { vm, dir, state, checkpointId, layers } = c;
  layers.inFlight.add(checkpointId);
  try {
    linkSync(join(dir, diskFileOf(state)), layer);
    fsyncDir(layers.layersDir);
    const next: VmState = { ...state, disk: state.disk + 1, chain: [checkpointId, ...state.chain] };
    const nextFile = join(dir, diskFileOf(next));
    await createOverlay(layer, nextFile, state.diskSizeBytes);
    fsyncFile(nextFile);
    for (const writable of [true, false]) {
      const fd = openForQemu(nextFile, writable);
      try {
        await vm.qmp.executeWithFds('add-fd', { 'fdset-id': diskFdset(next) }, [fd]);
      } finally {
        closeSync(fd);
      }
    }
    await vm.qmp.execute('blockdev-add', { driver: 'qcow2', 'node-name': diskNodeOf(next), file: { driver: 'file', filename: `/dev/fdset/${diskFdset(next)}`, cache: { direct: false, 'no-flush': false } }, backing: null });
    await vm.qmp.execute('blockdev-snapshot', { node: diskNodeOf(state), overlay: diskNodeOf(next) });
    await vm.qmp.execute('remove-fd', { 'fdset-id': diskFdset(state) });
    c.recordState(next);
    rmSync(join(dir, diskFileOf(state)), { force: true });
    sealFile(layer);
    return next;
  } finally {
    layers.inFlight.delete(checkpointId);
  }
}

/** The recorded digests of the layers a runtime's disk sits on. */
function chainDigests(layers: DiskLayers, chain: string[]): Record<string, string> {
  const digests: Record<string, string> = {};
  for (const id of chain) {
    const d = layers.readLayerDigest(id);
    if (d === null) throw new Error(`disk layer ${id} has no recorded digest`);
    digests[id] = d;
  }
  return digests;
}

/** The disk space a file takes (sparse files take less than their size); 0 when it does not exist. */
function allocatedBytes(path: string): number {
  try {
    return statSync(path).blocks * 512;
  } catch {
    return 0;
  }
}

/**
 * A runtime with no VM (shut down or crashed) as a checkpoint of its disk alone, for a move to
 * another host (core/runtime-moves.ts): its overlay is linked among the layers as the
 * checkpoint's, under a manifest with no RAM and an empty device state. The runtime is not
 * moved onto a new overlay: nothing writes its disk while it has no VM, and a move that fails
 * drops the link, leaving the disk as it was. The link is not sealed for the same reason.
 */
export async function captureStoppedDisk(c: Omit<CaptureRequest, 'vm' | 'recordState'> & { shape: { memoryMib: number; vcpus: number } }): Promise<void> {
  const { dir, state, checkpointId, layers } = c;
  const cpDir = layers.checkpointDir(checkpointId);
  mkdirSync(cpDir, { mode: 0o700 });
  fsyncDir(layers.checkpointsDir);
  layers.inFlight.add(checkpointId);
  try {
    const layer = layers.layerFile(checkpointId);
    linkSync(join(dir, diskFileOf(state)), layer);
    fsyncDir(layers.layersDir);
    await flushFiles([layer]);
    const layerDigest = await digestFile(layer);
    writeFileDurably(layers.layerDigestFile(checkpointId), `${layerDigest}\n`, 0o400);
    const stateFile = join(cpDir, 'state');
    writeFileDurably(stateFile, '', 0o400);
    const manifest: CheckpointManifest = {
      version: MANIFEST_VERSION,
      chain: [checkpointId, ...state.chain],
      ...(state.base === undefined ? {} : { base: state.base }),
      hasRam: false,
      memoryMib: c.shape.memoryMib,
      vcpus: c.shape.vcpus,
      diskSizeBytes: state.diskSizeBytes,
      balloonMib: c.shape.memoryMib,
      qemuVersion: c.qemuVersion,
      digests: { state: await digestFile(stateFile), ram: null, layers: { [checkpointId]: layerDigest, ...chainDigests(layers, state.chain) } },
    };
    layers.writeManifest(checkpointId, manifest);
  } finally {
    layers.inFlight.delete(checkpointId);
  }
}
