/**
 * Taking a checkpoint from another VM host (docs/scaling.md, "Moving checkpoints"): its disk
 * layers that this host lacks, its device state and RAM, then its manifest, last, as a capture
 * writes them. Every file is checked against the digest the manifest recorded when the checkpoint
 * became ready, as it arrives: what lands here is byte for byte what was captured, or nothing.
 *
 * The peer is another host of the fleet, but its files are read as a guest's would be: the
 * manifest is checked field by field, each file is bounded by what the manifest says it can
 * hold, and nothing is named by anything but a checked id.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { VesselError, failedPrecondition, unavailable } from '../core/errors.js';
import type { RemoteCheckpoint } from '../core/ports.js';
import { fsyncDir, writeFileDurably } from '../platform/durable-files.js';
import { DiskLayers, manifestProblem, sealFile, type CheckpointManifest } from './disk-layers.js';
import { digestFile } from './file-digest.js';
import { SparseStreamError, writeSparseFrames } from './sparse-stream.js';

const MiB = 1024 * 1024;
/** Device state beside the RAM a private mapping puts in the same stream: a few MiB under microvm. */
const DEVICE_STATE_ALLOWANCE = 256 * MiB;

export interface ImportRequest {
  checkpointId: string;
  source: RemoteCheckpoint;
  layers: DiskLayers;
  qemuVersion: string;
  /** The digest of this host's guest image (guest-image.ts, imageContentDigest). */
  imageDigest: string;
  /** True when this host's copy of the layer was found to match that digest since it started. */
  layerVerified(layerId: string, digest: string): boolean;
  /**
   * The shape the store records for it: the manifest's sizes come from the peer and bound what
   * is taken here and what its forks run with, so they must be the ones admission counted.
   */
  expected: { memoryMib: number; vcpus: number };
}

/** Brings the checkpoint's files here; on failure nothing of it is left but layers the next collect removes. */
export async function importCheckpoint(r: ImportRequest): Promise<void> {
  const { checkpointId, source, layers } = r;
  const manifest = checkedManifest(r);
  const dir = layers.checkpointDir(checkpointId);
  // Here already (a move that finished, asked again): the driver checked this copy before it asked.
  if (existsSync(layers.manifestFile(checkpointId))) return;
  // A directory without its manifest is an import or capture cut short: nothing in it is used.
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { mode: 0o700 });
  fsyncDir(layers.checkpointsDir);
  // Layers on their way in are in no manifest yet: a collect meanwhile must spare them.
  const guarded = manifest.chain.filter((id) => !layers.inFlight.has(id));
  for (const id of guarded) layers.inFlight.add(id);
  try {
    for (const layerId of manifest.chain) await takeLayer(r, manifest, layerId, dir);
    const memoryBytes = manifest.memoryMib * MiB;
    await takeFile(source, 'state', join(dir, 'state'), manifest.digests.state, memoryBytes + DEVICE_STATE_ALLOWANCE);
    if (manifest.digests.ram !== null) await takeFile(source, 'ram', join(dir, 'ram'), manifest.digests.ram, memoryBytes);
    // Last: a checkpoint without its manifest is not complete.
    layers.writeManifest(checkpointId, manifest);
    fsyncDir(dir);
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  } finally {
    for (const id of guarded) layers.inFlight.delete(id);
  }
}

function checkedManifest(r: ImportRequest): CheckpointManifest {
  const { manifest, image } = r.source.description;
  const problem = manifestProblem(manifest);
  if (problem !== null) throw failedPrecondition(`checkpoint ${r.checkpointId} cannot be moved: ${problem}`);
  const m = manifest as CheckpointManifest;
  if (m.qemuVersion !== r.qemuVersion) throw failedPrecondition(`checkpoint ${r.checkpointId} was made by ${m.qemuVersion}, and this host runs ${r.qemuVersion}: its device state would not load`);
  if (image !== r.imageDigest) throw failedPrecondition(`checkpoint ${r.checkpointId} sits on a guest image whose files differ from this host's: build the image once and give every VM host the same files`);
  for (const id of m.chain) if (m.digests.layers[id] === undefined) throw failedPrecondition(`checkpoint ${r.checkpointId} cannot be moved: its disk layer ${id} has no recorded digest`);
  const unlike = (what: string) => failedPrecondition(`checkpoint ${r.checkpointId} cannot be moved: its manifest's ${what} is not what the store records for it`);
  if (m.chain[0] !== r.checkpointId) throw unlike('top disk layer');
  if (m.memoryMib !== r.expected.memoryMib) throw unlike('memory size');
  if (m.vcpus !== r.expected.vcpus) throw unlike('vCPU count');
  if (m.hasRam !== (m.digests.ram !== null)) throw unlike('RAM file');
  return m;
}

/**
 * A disk layer this host already holds is kept when it is what the manifest says (layers never
 * change once frozen); otherwise the layer is taken from the source into the checkpoint's
 * directory, checked, and only then linked among the layers.
 */
async function takeLayer(r: ImportRequest, manifest: CheckpointManifest, layerId: string, dir: string): Promise<void> {
  const { layers } = r;
  const expected = manifest.digests.layers[layerId]!;
  const target = layers.layerFile(layerId);
  if (existsSync(target)) {
    if (r.layerVerified(layerId, expected) || (layers.readLayerDigest(layerId) === expected && (await digestFile(target)) === expected)) return;
    throw failedPrecondition(`disk layer ${layerId} on this host is not the one checkpoint ${r.checkpointId} was captured on: this host's copy is damaged`);
  }
  // A layer holds at most its disk's clusters and qcow2's tables for them.
  const bound = manifest.diskSizeBytes + Math.ceil(manifest.diskSizeBytes / 8) + 64 * MiB;
  const incoming = join(dir, `layer-${layerId}`);
  await takeFile(r.source, layerId, incoming, expected, bound);
  writeFileDurably(layers.layerDigestFile(layerId), `${expected}\n`, 0o400);
  renameSync(incoming, target);
  fsyncDir(layers.layersDir);
}

async function takeFile(source: RemoteCheckpoint, file: string, path: string, expected: string, maxBytes: number): Promise<void> {
  const what = file === 'state' || file === 'ram' ? `its ${file} file` : `its disk layer ${file}`;
  let got: string;
  const frames = await source.open(file);
  try {
    got = await writeSparseFrames(frames, path, maxBytes);
  } catch (err) {
    if (err instanceof VesselError) throw err;
    if (err instanceof SparseStreamError) throw failedPrecondition(`${what} arrived malformed: ${err.message}`);
    // A local file's error names its path: it is logged whole, and the caller hears 'internal'.
    if ((err as NodeJS.ErrnoException).path !== undefined) throw new Error(`could not write ${what} here`, { cause: err });
    throw unavailable(`copying ${what} from the host that holds it failed: ${(err as Error).message}`);
  } finally {
    // Read to its end or not, the answer goes: the holder's file is not held open for nothing.
    (frames as Partial<Readable>).destroy?.();
  }
  if (got !== expected) throw failedPrecondition(`${what} arrived different from what was captured`);
  sealFile(path);
}
