/**
 * Disk layers and checkpoint files. A runtime's disk is a qcow2 overlay whose backing chain runs
 * through frozen layers (one per checkpoint) down to the read-only guest image. A layer is kept
 * while any runtime's chain or any checkpoint's manifest names it, and collected once nothing
 * does; the filesystem is the source of truth, so this survives crashes.
 */
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { writeFileDurably } from '../platform/durable-files.js';
import { runCommand } from '../platform/run-command.js';
import { readVmState, VmStateError } from './vm-state.js';

export const MANIFEST_VERSION = 2;

const Digest = Type.String({ pattern: '^sha256-chunks-1m:[0-9a-f]{64}$' });

const ManifestSchema = Type.Object({
  version: Type.Literal(MANIFEST_VERSION),
  chain: Type.Array(Type.String({ pattern: '^[0-9a-f-]{36}$' }), { minItems: 1 }),
  /** The template whose root disk is the chain's bottom; absent: the guest image's rootfs. */
  base: Type.Optional(Type.String({ pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' })),
  hasRam: Type.Boolean(),
  memoryMib: Type.Integer({ minimum: 1 }),
  vcpus: Type.Integer({ minimum: 1 }),
  diskSizeBytes: Type.Integer({ minimum: 1 }),
  /** The balloon target the guest was captured with: its forks start with that much memory given up. */
  balloonMib: Type.Integer({ minimum: 1 }),
  /** The QEMU that wrote the device state: microvm is not a versioned machine type, so another QEMU may not read it back. */
  qemuVersion: Type.String(),
  /** What the files were when the checkpoint became ready: its own, and every disk layer of its chain. */
  digests: Type.Object({ state: Digest, ram: Type.Union([Digest, Type.Null()]), layers: Type.Record(Type.String(), Digest) }),
});

export type CheckpointManifest = Static<typeof ManifestSchema>;

/** Why a checkpoint's manifest cannot be used: missing, torn, or written by another version. */
export function manifestProblem(raw: unknown): string | null {
  if (Value.Check(ManifestSchema, raw)) return null;
  if (typeof raw === 'object' && raw !== null && (raw as { version?: unknown }).version !== MANIFEST_VERSION) return 'it was made by an older Vessel that recorded no digests of its files';
  const first = Value.Errors(ManifestSchema, raw).First();
  return `its manifest is damaged (${first === undefined ? 'invalid' : `${first.path || '/'}: ${first.message}`})`;
}

/**
 * A checkpoint's files belong to root alone and are never written again: QEMU opens them as
 * root before it drops to its uid, read-only (the RAM file is mapped privately, its disk layers
 * are backing files), so nothing that runs guest code can change them whatever it attempts.
 */
export function sealFile(path: string): void {
  chownSync(path, 0, 0);
  chmodSync(path, 0o400);
}

/**
 * A new qcow2 overlay of `sizeBytes` on a frozen layer. `-u`: the layer is not opened here, and
 * the name written into the header is never followed (QEMU is given the chain as descriptors).
 */
export const createOverlay = (layerFile: string, file: string, sizeBytes: number): Promise<string> =>
  runCommand('qemu-img', ['create', '-q', '-f', 'qcow2', '-u', '-b', layerFile, '-F', 'qcow2', file, String(sizeBytes)]);

export class DiskLayers {
  readonly layersDir: string;
  readonly checkpointsDir: string;
  readonly runtimesDir: string;

  constructor(dataDir: string) {
    this.layersDir = join(dataDir, 'layers');
    this.checkpointsDir = join(dataDir, 'checkpoints');
    this.runtimesDir = join(dataDir, 'runtimes');
    // Root's alone: QEMU opens what it needs as root before it drops to its uid, and is then
    // chrooted away from all of it.
    for (const d of [this.layersDir, this.checkpointsDir, this.runtimesDir]) {
      mkdirSync(d, { recursive: true, mode: 0o700 });
      chmodSync(d, 0o700);
    }
  }

  layerFile = (layerId: string): string => join(this.layersDir, `${layerId}.qcow2`);
  /** The layer's digest, recorded when it was frozen; later checkpoints on it copy it into their manifests. */
  layerDigestFile = (layerId: string): string => join(this.layersDir, `${layerId}.digest`);
  checkpointDir = (checkpointId: string): string => join(this.checkpointsDir, checkpointId);
  manifestFile = (checkpointId: string): string => join(this.checkpointDir(checkpointId), 'manifest.json');

  /** Writes a checkpoint's manifest durably and seals it: written last, it makes the checkpoint complete. */
  writeManifest(checkpointId: string, manifest: CheckpointManifest): void {
    writeFileDurably(this.manifestFile(checkpointId), JSON.stringify(manifest, null, 2), 0o400);
    sealFile(this.manifestFile(checkpointId));
  }

  /** The manifest, or why there is none to use. */
  readManifest(checkpointId: string): { manifest: CheckpointManifest } | { problem: string } {
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(this.manifestFile(checkpointId), 'utf8'));
    } catch (err) {
      // The error's code, not its message: that names the file's path, and problems reach responses.
      const code = (err as NodeJS.ErrnoException).code;
      return { problem: code === 'ENOENT' ? 'its files are missing' : `its manifest cannot be read (${code ?? 'not JSON'})` };
    }
    const problem = manifestProblem(raw);
    return problem === null ? { manifest: raw as CheckpointManifest } : { problem };
  }

  readLayerDigest(layerId: string): string | null {
    const f = this.layerDigestFile(layerId);
    return existsSync(f) ? readFileSync(f, 'utf8').trim() : null;
  }

  /**
   * The layers a checkpoint sits on, from its manifest even when that is from an older version or
   * fails its checks otherwise; [] when it has none yet (a capture in progress), null when unknown.
   */
  #chainOf(checkpointId: string): string[] | null {
    let raw: unknown;
    try {
      raw = JSON.parse(readFileSync(this.manifestFile(checkpointId), 'utf8'));
    } catch (err) {
      return (err as NodeJS.ErrnoException).code === 'ENOENT' ? [] : null;
    }
    const chain = (raw as { chain?: unknown } | null)?.chain;
    return Array.isArray(chain) && chain.every((l) => typeof l === 'string') ? (chain as string[]) : null;
  }

  /**
   * The disk space of layers that `runtimeIds` and `checkpointIds` stand on whose own checkpoint
   * was deleted. Such a layer stays while anything sits on it, and no checkpoint's size counts it
   * any more, so its owner must: otherwise "write, checkpoint, delete", repeated, grows the disk
   * past every quota. Each layer counts once however many stand on it.
   */
  bytesOfOrphanedLayers(runtimeIds: string[], checkpointIds: string[]): number {
    const standsOn = new Set<string>();
    for (const id of runtimeIds) {
      try {
        readVmState(join(this.runtimesDir, id)).chain.forEach((l) => standsOn.add(l));
      } catch (err) {
        if (!(err instanceof VmStateError)) throw err; // no VM yet, or a torn state: it stands on nothing we can name
      }
    }
    for (const id of checkpointIds) (this.#chainOf(id) ?? []).forEach((l) => standsOn.add(l));
    let bytes = 0;
    for (const layerId of standsOn) {
      // A checkpoint's directory lives from its capture's start to its delete: its size counts it.
      if (existsSync(this.checkpointDir(layerId))) continue;
      try {
        bytes += statSync(this.layerFile(layerId)).blocks * 512;
      } catch {
        // collected meanwhile
      }
    }
    return bytes;
  }

  /** Layers linked by a checkpoint in progress and not yet recorded in its runtime's vm.json. */
  readonly inFlight = new Set<string>();

  /**
   * Deletes layers that no runtime and no checkpoint names. A layer in flight is spared; after
   * a crash an unrecorded layer is only a second name for the runtime's own disk, so removing it
   * is harmless. A runtime whose state file cannot be read keeps every layer: nothing is removed
   * on a guess.
   */
  collect(): string[] {
    const used = new Set<string>();
    for (const id of readdirSync(this.runtimesDir)) {
      try {
        readVmState(join(this.runtimesDir, id)).chain.forEach((l) => used.add(l));
      } catch (err) {
        if (!(err instanceof VmStateError)) throw err;
        if (existsSync(join(this.runtimesDir, id, 'vm.json'))) return [];
      }
    }
    for (const id of readdirSync(this.checkpointsDir)) {
      const chain = this.#chainOf(id);
      if (chain === null) return [];
      chain.forEach((l) => used.add(l));
    }
    const removed: string[] = [];
    for (const f of readdirSync(this.layersDir)) {
      const id = f.replace(/\.(qcow2|digest)$/, '');
      if (used.has(id) || this.inFlight.has(id)) continue;
      rmSync(join(this.layersDir, f), { force: true });
      if (f.endsWith('.qcow2')) removed.push(id);
    }
    return removed;
  }
}
