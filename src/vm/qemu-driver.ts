/**
 * The QEMU implementation of the core's VmDriver port: one detached QEMU `microvm` per runtime,
 * a qcow2 overlay on a chain of frozen layers over the read-only guest image, QMP for the
 * machine and the guest agent for everything inside it. Checkpoints are a QMP migration of the
 * device state plus the RAM file; forks restore them with `-incoming`.
 */
import { chownSync, closeSync, existsSync, linkSync, mkdirSync, openSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { availableParallelism, totalmem } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { VesselError, failedPrecondition, invalidArgument, unavailable } from '../core/errors.js';
import type { LiveState, VmDriver, VmSpec } from '../core/ports.js';
import type { ExecRequest, ExecResult, Resources } from '../core/types.js';
import { hostTscKhz, type Accel } from './accel.js';
import { DiskLayers, MANIFEST_VERSION, readJson, sealFile, writeJsonAtomic, type CheckpointManifest, type VmState } from './disk-layers.js';
import { ChunkedDigest, copySparseWithDigest, digestFile } from './file-digest.js';
import { GuestAgentError, type GuestAgentClient } from './guest-agent-client.js';
import { execInGuest, GUEST_CA_ENV, GUEST_CA_FILE } from './guest-exec.js';
import { readGuestFile, writeGuestFile } from './guest-files.js';
import { giveIdentity, syncClock } from './guest-identity.js';
import type { GuestImage } from './guest-image.js';
import { migrateFromFdset, migrateToFile } from './migration.js';
import { BOOT_PROFILE, qemuArgs } from './qemu-args.js';
import { QemuVm, vmPaths } from './qemu-vm.js';
import { runCommand } from '../platform/run-command.js';
import { Teardown } from './teardown.js';

export interface QemuDriverOptions {
  dataDir: string;
  image: GuestImage;
  accel: Accel;
  /** `qemu-system-x86_64 --version`: device state written by one QEMU is only restored by the same. */
  qemuVersion: string;
  /** The gateway's CA (PEM), put in every guest's trust store when its template is made. */
  guestCaPem: string;
  /** Multiplies host memory when admitting VMs: 1 means the sum of limits fits in RAM. */
  memoryOvercommit: number;
  bootTimeoutMs?: number;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void };
}

const MiB = 1024 * 1024;
/** Kept back for the host itself and the service. */
const HOST_RESERVE_MIB = 1024;
const UID_BASE = 200_000;
const UID_RANGE = 100_000;
const TEMPLATE_PREFIX = 'template-';
/** Marks a warm-pool spare's directory until a create claims it; the sweep removes unclaimed ones. */
const SPARE_MARKER = 'spare';
/** What an idle fork of a 512 MiB system checkpoint holds privately under TCG (bench/checkpoint: 45–51 MiB). */
const FORK_FOOTPRINT_MIB = 96;
/** How long a template's guest may take to give its balloon what it asked for. */
const BALLOON_SETTLE_MS = 60_000;
/** The balloon counts in pages and the guest may keep a few back; this close is there. */
const BALLOON_SLACK_MIB = 4;
/** How long a resume waits for the guest agent before it leaves the clock as it is. */
const CLOCK_SYNC_AGENT_MS = 2000;

function availableMib(): number {
  const m = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSafe('/proc/meminfo'));
  return m === null ? totalmem() / MiB : Number(m[1]) / 1024;
}

interface LiveVm {
  vm: QemuVm;
  memoryMib: number;
  vcpus: number;
  tap: string | null;
  uid: number;
  /**
   * Its RAM is a checkpoint's file mapped privately and read-only: clean pages are shared with
   * every fork of that checkpoint, and QEMU cannot discard any page, so its balloon must not
   * inflate (the guest would write every page it gives up and make it private).
   */
  ramMapsCheckpoint: boolean;
  /** The balloon target in MiB (memoryMib while nothing is given up). */
  balloonMib: number;
}

export class QemuDriver implements VmDriver {
  readonly #live = new Map<string, LiveVm>();
  /** Warm-pool spares not claimed yet. */
  readonly #spares = new Set<string>();
  readonly #tscKhz = hostTscKhz();
  readonly #layers: DiskLayers;
  readonly #baseSize: number;
  /** Layers whose digest was checked since this process started; layers never change, so once is enough. */
  readonly #verifiedLayers = new Map<string, string>();
  #onExit: (runtimeId: string) => void = () => undefined;

  constructor(private readonly opts: QemuDriverOptions) {
    this.#layers = new DiskLayers(opts.dataDir);
    this.#baseSize = statSync(opts.image.rootfs).size;
  }

  unavailableReason(): string | null {
    return null;
  }

  /** The image, the CA, the boot profile and the QEMU baked into its template: a change to any makes new templates. */
  imageId(): string {
    const baked = createHash('sha256').update(this.opts.guestCaPem).update(JSON.stringify(BOOT_PROFILE)).update(this.opts.qemuVersion).digest('hex').slice(0, 8);
    return `${this.opts.image.hash}-${baked}`;
  }

  hostLimits(): { vcpus: number; memoryMib: number } {
    return { vcpus: availableParallelism(), memoryMib: Math.floor(totalmem() / MiB - HOST_RESERVE_MIB) };
  }

  runtimeDir(runtimeId: string): string {
    return join(this.#layers.runtimesDir, runtimeId);
  }

  async create(spec: VmSpec): Promise<void> {
    const spare = this.#live.get(spec.runtimeId);
    if (spare !== undefined && this.#spares.delete(spec.runtimeId)) {
      if (!spare.vm.exited) return this.#claim(spec, spare);
      await this.destroy(spec.runtimeId);
    }
    await this.#create(spec, false);
  }

  async #create(spec: VmSpec, spare: boolean): Promise<void> {
    this.#admit(spec.resources, spec.fromCheckpointId !== null);
    const dir = this.runtimeDir(spec.runtimeId);
    await this.#undoOnFailure(async (undo) => {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      undo.push(() => rmSync(dir, { recursive: true, force: true }));
      // Before anything runs, so that a crash at any point leaves a spare the sweep recognizes.
      if (spare) writeFileSync(join(dir, SPARE_MARKER), '');
      if (spec.fromCheckpointId === null) {
        const state: VmState = { diskFile: 'disk-0.qcow2', node: 'disk-0', chain: [], ram: 'shared', diskSizeBytes: this.#baseSize };
        await runCommand('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', this.opts.image.rootfs, '-F', 'raw', join(dir, state.diskFile)]);
        writeJsonAtomic(vmPaths(dir).state, state);
        await this.#boot(spec, state, undo);
      } else {
        await this.#fork(spec, spec.fromCheckpointId, undo);
      }
    });
  }

  async createSpare(spec: VmSpec): Promise<void> {
    await this.#create(spec, true);
    this.#spares.add(spec.runtimeId);
  }

  /**
   * A spare becomes the runtime: its clock has run since it was set, so it only gets its name and
   * fresh entropy (the writes it made when it was prepared warmed these paths in QEMU's cache).
   */
  async #claim(spec: VmSpec, live: LiveVm): Promise<void> {
    rmSync(join(this.runtimeDir(spec.runtimeId), SPARE_MARKER), { force: true });
    const t0 = performance.now();
    await giveIdentity(await live.vm.agent(), spec.hostname, false);
    await this.setMemoryTarget(spec.runtimeId, spec.resources.requests.memory_mib);
    this.opts.log.info({ runtimeId: spec.runtimeId, how: 'spare', personalizeMs: Math.round(performance.now() - t0) }, 'VM ready');
  }

  async start(spec: VmSpec): Promise<void> {
    const dir = this.runtimeDir(spec.runtimeId);
    const paths = vmPaths(dir);
    if (!existsSync(paths.state)) throw failedPrecondition('the runtime has no disk left to boot');
    const saved = readJson<VmState>(paths.state);
    const suspended = saved.suspended;
    this.#admit(spec.resources, false);
    await this.#undoOnFailure(async (undo) => {
      if (suspended !== undefined) {
        // Back from suspension: the same memory, processes and disk, restored from its own files.
        const state: VmState = { ...saved, ram: suspended.ram, suspended: undefined };
        await this.#boot(spec, state, undo, join(dir, suspended.stateFile));
        writeJsonAtomic(paths.state, state);
        rmSync(join(dir, suspended.stateFile), { force: true });
        return;
      }
      // A fresh boot gets fresh RAM of its own; a checkpoint's RAM belongs to that snapshot only.
      const state: VmState = { ...saved, ram: 'shared', balloonMib: undefined };
      rmSync(paths.ram, { force: true });
      writeJsonAtomic(paths.state, state);
      await this.#boot(spec, state, undo);
    });
  }

  async suspend(runtimeId: string): Promise<void> {
    const live = this.#running(runtimeId);
    const dir = this.runtimeDir(runtimeId);
    const paths = vmPaths(dir);
    const state = readJson<VmState>(paths.state);
    const stateFile = 'suspended.state';
    await live.vm.qmp.execute('stop');
    try {
      await migrateToFile(live.vm.qmp, paths.migrateSocket, join(dir, stateFile));
    } catch (err) {
      rmSync(join(dir, stateFile), { force: true });
      await live.vm.qmp.execute('cont');
      throw err;
    }
    // A shared RAM file already holds the memory; a private mapping went into the stream.
    writeJsonAtomic(paths.state, { ...state, suspended: { stateFile, ram: state.ram === 'shared' ? 'shared' : null } });
    await live.vm.kill();
    this.#live.delete(runtimeId);
  }

  async pause(runtimeId: string): Promise<void> {
    await this.#vm(runtimeId).qmp.execute('stop');
  }

  async resume(runtimeId: string): Promise<void> {
    const vm = this.#vm(runtimeId);
    await vm.qmp.execute('cont');
    await this.#syncClock(runtimeId, vm);
  }

  /**
   * A stopped QEMU stops the guest's clock too: after a pause of an hour the guest would be an
   * hour behind, and TLS would find fresh certificates not yet valid. Best effort: a guest whose
   * agent does not answer still runs.
   */
  async #syncClock(runtimeId: string, vm: QemuVm): Promise<void> {
    try {
      await syncClock(await vm.agent(CLOCK_SYNC_AGENT_MS));
    } catch (err) {
      this.opts.log.warn({ runtimeId, err: (err as Error).message }, 'could not set the guest clock after a pause');
    }
  }

  async stop(runtimeId: string, deadlineMs: number): Promise<void> {
    const live = this.#live.get(runtimeId);
    if (live === undefined) return;
    await live.vm.shutdown(deadlineMs);
    this.#live.delete(runtimeId);
  }

  async destroy(runtimeId: string): Promise<void> {
    this.#spares.delete(runtimeId);
    const dir = this.runtimeDir(runtimeId);
    const vm = this.#live.get(runtimeId)?.vm ?? (await QemuVm.adopt(dir));
    if (vm !== null) await vm.kill();
    this.#live.delete(runtimeId);
    rmSync(dir, { recursive: true, force: true });
    this.#layers.collect();
  }

  exec(runtimeId: string, request: ExecRequest): Promise<ExecResult> {
    return this.#withAgent(runtimeId, (agent) => execInGuest(agent, request));
  }

  readFile(runtimeId: string, path: string): Promise<Readable> {
    return this.#withAgent(runtimeId, (agent) => readGuestFile(agent, path));
  }

  writeFile(runtimeId: string, path: string, body: Readable, maxBytes: number): Promise<number> {
    return this.#withAgent(runtimeId, (agent) => writeGuestFile(agent, path, body, maxBytes));
  }

  /**
   * The balloon gives the guest `mib` of its memory and returns the rest to the host. A VM whose
   * RAM maps a checkpoint is first moved onto memory of its own: only then can QEMU discard the
   * pages the guest gives up.
   */
  async setMemoryTarget(runtimeId: string, mib: number): Promise<void> {
    let live = this.#running(runtimeId);
    const target = Math.min(mib, live.memoryMib);
    if (target === live.balloonMib) return;
    // Deflating discards nothing, so any VM may; inflating needs memory QEMU can discard.
    if (target < live.balloonMib && live.ramMapsCheckpoint) live = await this.#moveToOwnMemory(runtimeId, live);
    await live.vm.qmp.execute('balloon', { value: target * MiB });
    live.balloonMib = target;
    const paths = vmPaths(this.runtimeDir(runtimeId));
    writeJsonAtomic(paths.state, { ...readJson<VmState>(paths.state), balloonMib: target });
  }

  /**
   * Waits until the guest has given its balloon what it can: the target, or as close as it gets
   * once it stops making progress. Fails if that is not within reach, since a guest that keeps
   * trying would go on writing pages it gives up.
   */
  async #settleBalloon(vm: QemuVm, targetMib: number): Promise<void> {
    const deadline = Date.now() + BALLOON_SETTLE_MS;
    let last = Infinity;
    let still = 0;
    for (;;) {
      const actualMib = (await vm.qmp.execute<{ actual: number }>('query-balloon')).actual / MiB;
      if (actualMib <= targetMib + BALLOON_SLACK_MIB) return;
      still = actualMib < last ? 0 : still + 1;
      last = Math.min(last, actualMib);
      if (still >= 20 || Date.now() > deadline) {
        throw invalidArgument(`resources.requests.memory_mib ${targetMib} is less than the guest can give up: it keeps ${Math.ceil(actualMib)} MiB`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * Pauses the VM, saves it whole (its RAM was a private mapping, so every page goes into the
   * stream), and restores it in a new QEMU on anonymous memory: the same processes, disk,
   * address and name, its checkpoint untouched. The guest is paused for the save and restore
   * (bench/checkpoint measures it) and its clock is set again afterwards.
   */
  async #moveToOwnMemory(runtimeId: string, live: LiveVm): Promise<LiveVm> {
    const dir = this.runtimeDir(runtimeId);
    const paths = vmPaths(dir);
    const saved = readJson<VmState>(paths.state);
    const stream = join(dir, 'move.state');
    const t0 = performance.now();
    await live.vm.qmp.execute('stop');
    try {
      await migrateToFile(live.vm.qmp, paths.migrateSocket, stream);
    } catch (err) {
      rmSync(stream, { force: true });
      await live.vm.qmp.execute('cont');
      throw err;
    }
    const t1 = performance.now();
    await live.vm.kill();
    this.#live.delete(runtimeId);
    const state: VmState = { ...saved, ram: null };
    const spec = { runtimeId, hostname: runtimeId, tap: live.tap, resources: { limits: { memory_mib: live.memoryMib }, requests: { memory_mib: live.memoryMib }, vcpus: live.vcpus } };
    try {
      await this.#undoOnFailure(async (undo) => {
        const vm = await this.#launch(spec, state, undo, stream);
        writeJsonAtomic(paths.state, state);
        await this.#syncClock(runtimeId, vm);
      });
    } catch (err) {
      // The old QEMU is gone and the new one did not come up: the runtime has crashed.
      this.#onExit(runtimeId);
      throw err;
    } finally {
      const streamMiB = Math.round(statSync(stream).size / MiB);
      rmSync(stream, { force: true });
      this.opts.log.info({ runtimeId, pausedMs: Math.round(performance.now() - t0), saveMs: Math.round(t1 - t0), streamMiB }, 'VM moved onto its own memory');
    }
    return this.#running(runtimeId);
  }

  /**
   * Pauses the VM, freezes its disk (the current overlay becomes the checkpoint's layer and a
   * new overlay goes on top), saves device state and RAM, and puts the VM back as it was. The
   * disk switch comes first and is recorded at once, so a failure after it leaves the runtime
   * on its new overlay, unharmed; only the checkpoint's own files are removed.
   */
  async checkpoint(runtimeId: string, checkpointId: string): Promise<{ bytes: number }> {
    const live = this.#running(runtimeId);
    const { vm, uid } = live;
    const dir = this.runtimeDir(runtimeId);
    const paths = vmPaths(dir);
    const state = readJson<VmState>(paths.state);
    const cpDir = this.#layers.checkpointDir(checkpointId);
    const runState = (await vm.qmp.execute<{ status: string }>('query-status')).status;
    const wasRunning = runState === 'running';
    if (runState === 'postmigrate') {
      // Block nodes stay inactive after an earlier capture until the VM runs again.
      await vm.qmp.execute('cont');
      await vm.qmp.execute('stop');
    } else if (wasRunning) {
      await vm.qmp.execute('stop');
    }
    try {
      mkdirSync(cpDir, { recursive: true, mode: 0o700 });
      const layer = this.#layers.layerFile(checkpointId);
      this.#layers.inFlight.add(checkpointId);
      linkSync(join(dir, state.diskFile), layer);
      const n = Number(state.node.replace('disk-', '')) + 1;
      const next: VmState = { ...state, diskFile: `disk-${n}.qcow2`, node: `disk-${n}`, chain: [checkpointId, ...state.chain] };
      const nextFile = join(dir, next.diskFile);
      await runCommand('qemu-img', ['create', '-q', '-f', 'qcow2', '-u', '-b', layer, '-F', 'qcow2', nextFile, String(state.diskSizeBytes)]);
      chownSync(nextFile, uid, uid);
      await vm.qmp.execute('blockdev-add', { driver: 'qcow2', 'node-name': next.node, file: { driver: 'file', filename: nextFile }, backing: null });
      // QEMU reopens the old overlay read-only here, as the new one's backing file.
      await vm.qmp.execute('blockdev-snapshot', { node: state.node, overlay: next.node });
      writeJsonAtomic(paths.state, next);
      this.#layers.inFlight.delete(checkpointId);
      rmSync(join(dir, state.diskFile), { force: true });
      sealFile(layer);

      // The layer is read for its digest while QEMU writes the device state, which is digested
      // on its way to the file; the RAM file is digested as it is copied. Nothing is read twice.
      const stateFile = join(cpDir, 'state');
      const stateDigest = new ChunkedDigest();
      const [layerDigest] = await Promise.all([digestFile(layer), migrateToFile(vm.qmp, paths.migrateSocket, stateFile, stateDigest)]);
      writeFileSync(this.#layers.layerDigestFile(checkpointId), `${layerDigest}\n`, { mode: 0o400 });
      sealFile(stateFile);
      const ramFile = join(cpDir, 'ram');
      const ramDigest = state.ram === 'shared' ? await copySparseWithDigest(paths.ram, ramFile) : null;
      if (ramDigest !== null) sealFile(ramFile);
      const manifest: CheckpointManifest = {
        version: MANIFEST_VERSION,
        chain: next.chain,
        hasRam: state.ram === 'shared',
        memoryMib: live.memoryMib,
        vcpus: live.vcpus,
        diskSizeBytes: state.diskSizeBytes,
        balloonMib: live.balloonMib,
        qemuVersion: this.opts.qemuVersion,
        digests: {
          state: stateDigest.digest(),
          ram: ramDigest,
          layers: { [checkpointId]: layerDigest, ...this.#chainDigests(state.chain) },
        },
      };
      for (const [id, digest] of Object.entries(manifest.digests.layers)) this.#verifiedLayers.set(id, digest);
      writeJsonAtomic(this.#layers.manifestFile(checkpointId), manifest);
      sealFile(this.#layers.manifestFile(checkpointId));
      return { bytes: [stateFile, ramFile, layer].reduce((sum, f) => sum + allocatedBytes(f), 0) };
    } catch (err) {
      this.#layers.inFlight.delete(checkpointId);
      rmSync(cpDir, { recursive: true, force: true });
      this.#layers.collect();
      throw err;
    } finally {
      if (wasRunning) {
        await vm.qmp.execute('cont');
        await this.#syncClock(runtimeId, vm);
      }
    }
  }

  /** The recorded digests of the layers a runtime's disk sits on. */
  #chainDigests(chain: string[]): Record<string, string> {
    const digests: Record<string, string> = {};
    for (const id of chain) {
      const d = this.#layers.readLayerDigest(id);
      if (d === null) throw new Error(`disk layer ${id} has no recorded digest`);
      digests[id] = d;
    }
    return digests;
  }

  /**
   * Checks the checkpoint's files against the digests its manifest recorded when it became
   * ready. Layers are shared by many checkpoints and checked once per service start.
   */
  async verifyCheckpoint(checkpointId: string): Promise<string | null> {
    const manifest = this.#layers.readManifest(checkpointId);
    if (manifest === null) return 'its files are missing';
    if (manifest.version !== MANIFEST_VERSION || manifest.digests === undefined) return 'it was made by an older Vessel that recorded no digests of its files';
    if (manifest.qemuVersion !== this.opts.qemuVersion) return `it was made by ${manifest.qemuVersion}, and this host runs ${this.opts.qemuVersion}`;
    const cpDir = this.#layers.checkpointDir(checkpointId);
    const files: Array<[string, string, string | null]> = [
      ['state', join(cpDir, 'state'), manifest.digests.state],
      ['ram', join(cpDir, 'ram'), manifest.digests.ram],
    ];
    for (const [what, path, expected] of files) {
      if (expected === null) continue;
      const problem = await checkDigest(path, expected);
      if (problem !== null) return `its ${what} file ${problem}`;
    }
    for (const layerId of manifest.chain) {
      const expected = manifest.digests.layers[layerId];
      if (expected === undefined) return `its disk layer ${layerId} has no recorded digest`;
      if (this.#verifiedLayers.get(layerId) === expected) continue;
      const problem = await checkDigest(this.#layers.layerFile(layerId), expected);
      if (problem !== null) return `its disk layer ${layerId} ${problem}`;
      this.#verifiedLayers.set(layerId, expected);
    }
    return null;
  }

  async deleteCheckpoint(checkpointId: string): Promise<void> {
    rmSync(this.#layers.checkpointDir(checkpointId), { recursive: true, force: true });
    this.#layers.collect();
  }

  /** Boots the image once into a template VM and checkpoints it; the template is then discarded. */
  async createTemplate(checkpointId: string, resources: Resources): Promise<void> {
    const templateId = `${TEMPLATE_PREFIX}${checkpointId}`;
    try {
      await this.create({ runtimeId: templateId, resources, fromCheckpointId: null, hostname: 'vessel', tap: null });
      await this.#installCa(templateId);
      // Its forks must find the balloon where they will keep it, not on its way there.
      if (resources.requests.memory_mib < resources.limits.memory_mib) await this.#settleBalloon(this.#vm(templateId), resources.requests.memory_mib);
      await this.checkpoint(templateId, checkpointId);
    } finally {
      await this.destroy(templateId);
    }
  }

  /**
   * The gateway's CA joins the system bundle, which SSL_CERT_FILE and friends point at
   * (GUEST_CA_ENV). Appended directly: update-ca-certificates rehashes every CA and takes most
   * of a minute under TCG. The copy in ca-certificates' local directory survives a later run.
   */
  async #installCa(runtimeId: string): Promise<void> {
    await this.writeFile(runtimeId, GUEST_CA_FILE, Readable.from([Buffer.from(this.opts.guestCaPem)]), 1 << 20);
    const profile = Object.entries(GUEST_CA_ENV).map(([k, v]) => `export ${k}=${v}`).join('; ');
    const result = await this.exec(runtimeId, {
      // Constant paths only, no quoting needed.
      command: `cat ${GUEST_CA_FILE} >> ${GUEST_CA_ENV.SSL_CERT_FILE} && ln -sf ${GUEST_CA_FILE} /etc/ssl/certs/vessel-egress-ca.pem && echo '${profile}' > /etc/profile.d/vessel-ca.sh`,
      args: [], cwd: null, env: {}, stdin: null, maxOutputBytes: 4096, timeoutSecs: 60,
    });
    if (result.exit_code !== 0) throw new Error(`could not install the gateway CA in the guest: ${result.stderr.trim()}`);
  }

  async reattach(runtimeId: string): Promise<LiveState> {
    const vm = await QemuVm.adopt(this.runtimeDir(runtimeId));
    if (vm === null) return 'gone';
    const state = readJson<VmState>(vmPaths(this.runtimeDir(runtimeId)).state);
    const memoryMib = this.#memoryOf(vm.pid);
    this.#track(runtimeId, { vm, memoryMib, vcpus: this.#vcpusOf(vm.pid), tap: this.#tapOf(vm.pid), uid: this.#uidOf(vm.pid), ramMapsCheckpoint: mapsCheckpoint(state), balloonMib: state.balloonMib ?? memoryMib });
    return vm.status();
  }

  /** Template VMs left by a crash mid-template, and spares a previous run kept, are of no use to anyone. */
  async sweep(): Promise<void> {
    for (const id of readdirSync(this.#layers.runtimesDir)) {
      if (id.startsWith(TEMPLATE_PREFIX) || existsSync(join(this.runtimeDir(id), SPARE_MARKER))) await this.destroy(id);
    }
    this.#layers.collect();
  }

  onUnexpectedExit(listener: (runtimeId: string) => void): void {
    this.#onExit = listener;
  }

  async close(): Promise<void> {
    for (const { vm } of this.#live.values()) vm.detach();
    this.#live.clear();
  }

  /**
   * Capacity, counted two ways. The sum of live limits may not pass host memory times the
   * overcommit factor; and the memory the host really has free (MemAvailable, less a reserve)
   * must cover what the new VM will hold at once: its whole limit for a cold boot, but only a
   * fork's private pages for a restore, since forks share their checkpoint's RAM file.
   */
  #admit(resources: Resources, fork: boolean): void {
    const want = resources.limits.memory_mib;
    const ceiling = (totalmem() / MiB - HOST_RESERVE_MIB) * this.opts.memoryOvercommit;
    let committed = 0;
    for (const v of this.#live.values()) committed += v.memoryMib;
    if (committed + want > ceiling) {
      throw unavailable(`not enough host memory: ${want} MiB requested, ${Math.max(0, Math.floor(ceiling - committed))} MiB left under the overcommit limit`);
    }
    const free = availableMib() - HOST_RESERVE_MIB;
    const need = fork ? Math.min(want, FORK_FOOTPRINT_MIB) : want;
    if (free < need) throw unavailable(`not enough free host memory: ${need} MiB needed, ${Math.max(0, Math.floor(free))} MiB free`);
  }

  async #fork(spec: VmSpec, checkpointId: string, undo: Teardown): Promise<void> {
    const manifest = this.#layers.readManifest(checkpointId);
    if (manifest === null) throw failedPrecondition(`the files of checkpoint ${checkpointId} are missing`);
    const dir = this.runtimeDir(spec.runtimeId);
    const state: VmState = {
      diskFile: 'disk-0.qcow2',
      node: 'disk-0',
      chain: manifest.chain,
      ram: manifest.hasRam ? { checkpoint: checkpointId } : null,
      diskSizeBytes: manifest.diskSizeBytes,
      ...(manifest.balloonMib < manifest.memoryMib ? { balloonMib: manifest.balloonMib } : {}),
    };
    await runCommand('qemu-img', ['create', '-q', '-f', 'qcow2', '-u', '-b', this.#layers.layerFile(manifest.chain[0]!), '-F', 'qcow2', join(dir, state.diskFile), String(manifest.diskSizeBytes)]);
    writeJsonAtomic(vmPaths(dir).state, state);
    await this.#boot({ ...spec, resources: { ...spec.resources, limits: { memory_mib: manifest.memoryMib }, vcpus: manifest.vcpus } }, state, undo, join(this.#layers.checkpointDir(checkpointId), 'state'));
  }

  /** Starts QEMU for the runtime and gives the guest its identity and its memory request. */
  async #boot(spec: VmSpec, state: VmState, undo: Teardown, restoreFrom?: string): Promise<void> {
    const t0 = performance.now();
    const vm = await this.#launch(spec, state, undo, restoreFrom);
    const t1 = performance.now();
    // Entropy (with the kernel's generator reseeded), clock and hostname: until then a fork is
    // its checkpoint's twin.
    await giveIdentity(await vm.agent(), spec.hostname, true);
    // A fork of a template made for this request already has its balloon there.
    await this.setMemoryTarget(spec.runtimeId, spec.resources.requests.memory_mib);
    const ms = (x: number) => Math.round(x);
    this.opts.log.info({ runtimeId: spec.runtimeId, how: restoreFrom === undefined ? 'boot' : 'restore', vmMs: ms(t1 - t0), personalizeMs: ms(performance.now() - t1) }, 'VM ready');
  }

  /** Starts QEMU for the runtime and tracks it: a cold boot, or a restore of `restoreFrom` (a migration stream). */
  async #launch(spec: Omit<VmSpec, 'fromCheckpointId'>, state: VmState, undo: Teardown, restoreFrom?: string): Promise<QemuVm> {
    const dir = this.runtimeDir(spec.runtimeId);
    const paths = vmPaths(dir);
    for (const f of [paths.qmpSocket, paths.agentSocket, paths.pidFile, paths.serialLog, paths.migrateSocket]) rmSync(f, { force: true });
    const uid = this.#allocateUid(spec.runtimeId);
    // QEMU, once it has dropped to its uid, must create overlays and reach sockets here.
    chownSync(dir, uid, uid);
    chownSync(join(dir, state.diskFile), uid, uid);
    const args = qemuArgs({
      accel: this.opts.accel,
      kernel: this.opts.image.kernel,
      initrd: this.opts.image.initrd,
      disk: { file: join(dir, state.diskFile), node: state.node },
      memory:
        state.ram === 'shared'
          ? { file: paths.ram, shared: true }
          : state.ram === null
            ? null
            : { file: join(this.#layers.checkpointDir(state.ram.checkpoint), 'ram'), shared: false },
      incoming: restoreFrom !== undefined,
      qmpSocket: paths.qmpSocket,
      agentSocket: paths.agentSocket,
      serialLog: paths.serialLog,
      memoryMib: spec.resources.limits.memory_mib,
      vcpus: spec.resources.vcpus,
      name: spec.hostname,
      runAs: `${uid}:${uid}`,
      tscKhz: this.#tscKhz,
      tap: spec.tap,
    });
    const vm = restoreFrom === undefined ? await this.#launchUntilAgent(dir, args, undo) : await this.#restore(dir, args, restoreFrom, undo);
    const memoryMib = spec.resources.limits.memory_mib;
    this.#track(spec.runtimeId, { vm, memoryMib, vcpus: spec.resources.vcpus, tap: spec.tap, uid, ramMapsCheckpoint: mapsCheckpoint(state), balloonMib: state.balloonMib ?? memoryMib });
    return vm;
  }

  async #restore(dir: string, args: string[], stateFile: string, undo: Teardown): Promise<QemuVm> {
    const fd = openSync(stateFile, 'r');
    let vm: QemuVm;
    try {
      vm = await QemuVm.launch(dir, args, fd);
    } finally {
      closeSync(fd);
    }
    undo.push(() => vm.kill());
    await migrateFromFdset(vm.qmp);
    await vm.qmp.execute('cont');
    await vm.waitForAgent(30_000);
    return vm;
  }

  /**
   * Under TCG a guest very rarely stalls before its first console line; a second boot of the
   * same disk is cheaper than failing the create, so one retry is allowed.
   */
  async #launchUntilAgent(dir: string, args: string[], undo: Teardown): Promise<QemuVm> {
    const timeout = this.opts.bootTimeoutMs ?? 60_000;
    for (let attempt = 1; ; attempt++) {
      const vm = await QemuVm.launch(dir, args);
      undo.push(() => vm.kill());
      try {
        await vm.waitForAgent(timeout);
        return vm;
      } catch (err) {
        await vm.kill();
        if (attempt >= 2) throw err;
        this.opts.log.warn({ dir, err: (err as Error).message }, 'guest did not come up; booting it once more');
      }
    }
  }

  #track(runtimeId: string, live: LiveVm): void {
    this.#live.set(runtimeId, live);
    live.vm.onExit((expected) => {
      if (this.#live.get(runtimeId)?.vm === live.vm) this.#live.delete(runtimeId);
      if (!expected) {
        this.opts.log.warn({ runtimeId, pid: live.vm.pid }, 'QEMU exited unexpectedly');
        this.#onExit(runtimeId);
      }
    });
  }

  #running(runtimeId: string): LiveVm {
    const live = this.#live.get(runtimeId);
    if (live === undefined || live.vm.exited) throw failedPrecondition('the runtime has no running VM');
    return live;
  }

  #vm = (runtimeId: string): QemuVm => this.#running(runtimeId).vm;

  /** Runs setup steps that register their undo; on failure the undo runs, exactly once. */
  async #undoOnFailure(work: (undo: Teardown) => Promise<void>): Promise<void> {
    const undo = new Teardown();
    try {
      await work(undo);
    } catch (err) {
      await undo.run();
      throw err;
    }
  }

  /** Agent transport failures (the VM died, the agent hangs) are the runtime being unavailable, not a bug. */
  async #withAgent<T>(runtimeId: string, work: (agent: () => Promise<GuestAgentClient>) => Promise<T>): Promise<T> {
    const vm = this.#vm(runtimeId);
    try {
      return await work(() => vm.agent());
    } catch (err) {
      if (err instanceof VesselError || err instanceof GuestAgentError) throw err;
      throw unavailable(vm.exited ? 'the VM stopped while the request ran' : `the guest agent is not responding: ${(err as Error).message}`);
    }
  }

  /** One uid per VM, so a compromised QEMU cannot signal or ptrace another. */
  #allocateUid(runtimeId: string): number {
    const used = new Set([...this.#live.values()].map((v) => v.uid));
    let uid = UID_BASE + (parseInt(runtimeId.replace(/[^0-9a-f]/g, '').slice(0, 8) || '0', 16) % UID_RANGE);
    while (used.has(uid)) uid = UID_BASE + ((uid - UID_BASE + 1) % UID_RANGE);
    return uid;
  }

  #uidOf(pid: number): number {
    const m = /^Uid:\s+(\d+)/m.exec(readFileSafe(`/proc/${pid}/status`));
    return m === null ? -1 : Number(m[1]);
  }

  #memoryOf(pid: number): number {
    const m = /\0-m\0(\d+)M\0/.exec(readFileSafe(`/proc/${pid}/cmdline`));
    return m === null ? 0 : Number(m[1]);
  }

  #tapOf(pid: number): string | null {
    const m = /\0tap,id=net0,ifname=([^,\0]+),/.exec(readFileSafe(`/proc/${pid}/cmdline`));
    return m === null ? null : m[1]!;
  }

  #vcpusOf(pid: number): number {
    const m = /\0-smp\0(\d+)\0/.exec(readFileSafe(`/proc/${pid}/cmdline`));
    return m === null ? 1 : Number(m[1]);
  }
}

function readFileSafe(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

/** The disk space a file takes (sparse files take less than their size); 0 when it does not exist. */
function allocatedBytes(path: string): number {
  try {
    return statSync(path).blocks * 512;
  } catch {
    return 0;
  }
}

/** Whether the VM's RAM is a checkpoint's file, mapped privately and read-only. */
const mapsCheckpoint = (state: VmState): boolean => state.ram !== null && state.ram !== 'shared';

/** Why the file no longer matches its recorded digest, or null when it does. */
async function checkDigest(path: string, expected: string): Promise<string | null> {
  let actual: string;
  try {
    actual = await digestFile(path);
  } catch (err) {
    return `cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`;
  }
  return actual === expected ? null : `has changed since the checkpoint was made (digest ${actual.slice(-12)}, recorded ${expected.slice(-12)})`;
}
