/**
 * Disk layers and the per-VM state file. A runtime's disk is a qcow2 overlay whose backing
 * chain runs through frozen layers (one per checkpoint) down to the read-only guest image. A
 * layer is kept while any runtime's chain or any checkpoint's manifest names it, and collected
 * once nothing does; the filesystem is the source of truth, so this survives crashes.
 */
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/** What a runtime directory records about its VM, for restarts and checkpoints. */
export interface VmState {
  /** File name of the top overlay in the runtime directory, and its block node name. */
  diskFile: string;
  node: string;
  /** Layers below the overlay, nearest first. */
  chain: string[];
  /** Where guest RAM lives: the VM's own shared file, a checkpoint's file mapped privately, or anonymous. */
  ram: 'shared' | { checkpoint: string } | null;
  diskSizeBytes: number;
  /** The balloon target last set, in MiB; absent while the guest has all of its memory. */
  balloonMib?: number;
  /** Set while the VM is suspended: its saved state file in the runtime directory, and where its RAM went. */
  suspended?: { stateFile: string; ram: 'shared' | null };
}

export const MANIFEST_VERSION = 2;

export interface CheckpointManifest {
  version: typeof MANIFEST_VERSION;
  chain: string[];
  hasRam: boolean;
  memoryMib: number;
  vcpus: number;
  diskSizeBytes: number;
  /** The balloon target the guest was captured with: its forks start with that much memory given up. */
  balloonMib: number;
  /** The QEMU that wrote the device state: microvm is not a versioned machine type, so another QEMU may not read it back. */
  qemuVersion: string;
  /** What the files were when the checkpoint became ready: its own, and every disk layer of its chain. */
  digests: { state: string; ram: string | null; layers: Record<string, string> };
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

export function writeJsonAtomic(file: string, value: unknown): void {
  writeFileSync(`${file}.tmp`, JSON.stringify(value, null, 2));
  renameSync(`${file}.tmp`, file);
}

export const readJson = <T>(file: string): T => JSON.parse(readFileSync(file, 'utf8')) as T;

export class DiskLayers {
  readonly layersDir: string;
  readonly checkpointsDir: string;
  readonly runtimesDir: string;

  constructor(dataDir: string) {
    this.layersDir = join(dataDir, 'layers');
    this.checkpointsDir = join(dataDir, 'checkpoints');
    this.runtimesDir = join(dataDir, 'runtimes');
    for (const d of [this.layersDir, this.checkpointsDir]) mkdirSync(d, { recursive: true, mode: 0o700 });
    // Each runtime directory belongs to its VM's uid, which must be able to reach it.
    mkdirSync(this.runtimesDir, { recursive: true, mode: 0o711 });
    chmodSync(this.runtimesDir, 0o711);
  }

  layerFile = (layerId: string): string => join(this.layersDir, `${layerId}.qcow2`);
  /** The layer's digest, recorded when it was frozen; later checkpoints on it copy it into their manifests. */
  layerDigestFile = (layerId: string): string => join(this.layersDir, `${layerId}.digest`);
  checkpointDir = (checkpointId: string): string => join(this.checkpointsDir, checkpointId);
  manifestFile = (checkpointId: string): string => join(this.checkpointDir(checkpointId), 'manifest.json');

  readManifest(checkpointId: string): CheckpointManifest | null {
    const f = this.manifestFile(checkpointId);
    return existsSync(f) ? readJson<CheckpointManifest>(f) : null;
  }

  readLayerDigest(layerId: string): string | null {
    const f = this.layerDigestFile(layerId);
    return existsSync(f) ? readFileSync(f, 'utf8').trim() : null;
  }

  /** Layers linked by a checkpoint in progress and not yet recorded in its runtime's vm.json. */
  readonly inFlight = new Set<string>();

  /**
   * Deletes layers that no runtime and no checkpoint names. A layer in flight is spared; after
   * a crash an unrecorded layer is only a second name for the runtime's own disk, so removing it
   * is harmless.
   */
  collect(): string[] {
    const used = new Set<string>();
    for (const id of readdirSync(this.runtimesDir)) {
      const f = join(this.runtimesDir, id, 'vm.json');
      if (existsSync(f)) readJson<VmState>(f).chain.forEach((l) => used.add(l));
    }
    for (const id of readdirSync(this.checkpointsDir)) {
      const m = this.readManifest(id);
      m?.chain.forEach((l) => used.add(l));
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
