/**
 * The QEMU implementation of the core's VM host ports (Machines, CheckpointFiles, and each
 * runtime's GuestAgent, a RemoteGuestAgent answered by the agent's process): one detached QEMU `microvm` per runtime,
 * a qcow2 overlay on a chain of frozen layers over the read-only guest image, QMP for the
 * machine and the guest agent for everything inside it. Checkpoints are a QMP migration of the
 * device state plus the RAM file; forks restore them with `-incoming`.
 *
 * A runtime's directory (`DATA_DIR/runtimes/<id>`) is root's alone: its state file, disk
 * overlays, RAM file, sockets and logs. QEMU gets what it needs as descriptors and runs under a
 * uid of the runtime's own, chrooted away from all of it (vm-launcher.ts).
 */
import { existsSync, mkdirSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createHash, randomInt } from 'node:crypto';
import { availableParallelism, totalmem } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { runBuffered } from '../core/commands.js';
import { failedPrecondition, invalidArgument, unavailable } from '../core/errors.js';
import type { CheckpointDescription, ConsoleLog, DiskChunk, GuestAgent, LiveState, RemoteCheckpoint, TemplateDisks, VmDriver, VmSpec } from '../core/ports.js';
import type { Resources } from '../core/types.js';
import { flushFiles, fsyncDir, fsyncFile } from '../platform/durable-files.js';
import { runCommand } from '../platform/run-command.js';
import { hostTscKhz, type Accel } from './accel.js';
import type { VmCgroups } from './cgroups.js';
import { captureCheckpoint, captureStoppedDisk } from './checkpoint-capture.js';
import { importCheckpoint } from './checkpoint-import.js';
import { DiskLayers, createOverlay, type CheckpointManifest } from './disk-layers.js';
import { digestFile } from './file-digest.js';
import { AgentPart, type AgentChannel } from './agent-part.js';
import { GUEST_CA_ENV, GUEST_CA_FILE } from './guest-exec.js';
import { imageContentDigest, type GuestImage } from './guest-image.js';
import { readRotatedLogEnd, rotateLog } from './log-rotation.js';
import { consoleLogOf } from '../core/console-log.js';
import { migrateToFile } from './migration.js';
import { BOOT_PROFILE } from './qemu-args.js';
import { RemoteGuestAgent } from './remote-guest-agent.js';
import { QemuVm, vmPaths } from './qemu-vm.js';
import { sparseFrames } from './sparse-stream.js';
import { TemplateDiskFiles } from './template-disks.js';
import { Teardown } from './teardown.js';
import { prepareJail, VmLauncher } from './vm-launcher.js';
import { diskFileOf, readVmState, SUSPENDED_STATE_FILE, VmStateError, writeVmState, type VmState } from './vm-state.js';

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
  /** The host's cgroups, or null when VMs run without (the composition root logs why). */
  cgroups: VmCgroups | null;
  bootTimeoutMs?: number;
  logLevel?: string;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
}

const MiB = 1024 * 1024;
/** Kept back for the host itself and the service. */
const HOST_RESERVE_MIB = 1024;

/** The most memory one VM may be given here: all of it but what the host keeps for itself. */
export function hostMemoryLimitMib(): number {
  return Math.floor(totalmem() / MiB - HOST_RESERVE_MIB);
}
/** QEMU uids: one per runtime directory, never shared while that directory exists. */
const UID_BASE = 200_000;
const UID_RANGE = 100_000;
const TEMPLATE_PREFIX = 'template-';
/** Marks a warm-pool spare's directory until a create claims it; the sweep removes unclaimed ones. */
const SPARE_MARKER = 'spare';
/** Where a VM's memory goes while it moves onto memory of its own. */
const MOVE_STATE_FILE = 'move.state';
/** What an idle fork of a 512 MiB system checkpoint holds privately under TCG (bench/checkpoint: 45–51 MiB). */
const FORK_FOOTPRINT_MIB = 96;
/** How long a template's guest may take to give its balloon what it asked for. */
const BALLOON_SETTLE_MS = 60_000;
/** How long a resume waits for the guest agent before it leaves the clock as it is. */
const CLOCK_SYNC_AGENT_MS = 2000;
/** How long a VM restored from a checkpoint has for its agent to answer once it runs (as a fork's restore). */
const RESTORED_AGENT_MS = 30_000;
/** How often the VMs' console and QEMU logs are checked against their cap. */
const LOG_CHECK_MS = 5000;

function availableMib(): number {
  const m = /^MemAvailable:\s+(\d+) kB/m.exec(readFileSafe('/proc/meminfo'));
  return m === null ? totalmem() / MiB : Number(m[1]) / 1024;
}

interface LiveVm {
  vm: QemuVm;
  /** The runtime's state, as written to its vm.json. */
  state: VmState;
}

/**
 * Its RAM is a checkpoint's file mapped privately and read-only: clean pages are shared with
 * every fork of that checkpoint, and QEMU cannot discard any page, so its balloon must not
 * inflate (the guest would write every page it gives up and make it private).
 */
/** A checkpoint's directory is named by its id. */
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const mapsCheckpoint = (state: VmState): boolean => state.ram !== null && state.ram !== 'shared';
const balloonOf = (state: VmState): number => state.balloonMib ?? state.memoryMib;

export class QemuDriver implements VmDriver, TemplateDisks {
  readonly #live = new Map<string, LiveVm>();
  /** Warm-pool spares not claimed yet. */
  readonly #spares = new Set<string>();
  /** VMs restored and left paused (VmSpec.paused) whose guest has not run here yet. */
  readonly #restoredPaused = new Set<string>();
  readonly #layers: DiskLayers;
  /** Templates' root disks, which the API's process builds and hands over. */
  readonly #templateDisks: TemplateDiskFiles;
  readonly #launcher: VmLauncher;
  /** The process that holds every VM's agent connection and parses what the guests send on it. */
  readonly #agents: AgentPart;
  readonly #baseSize: number;
  /** Layers whose digest was checked since this process started; layers never change, so once is enough. */
  readonly #verifiedLayers = new Map<string, string>();
  /** The uid of every runtime directory, read from their state files once, then kept up to date. */
  #uids: Map<string, number> | null = null;
  readonly #logTimer: NodeJS.Timeout;
  #onExit: (runtimeId: string) => void = () => undefined;
  /** Checkpoint imports, one at a time: they share the layers' in-flight set, and the host's link. */
  #imports: Promise<unknown> = Promise.resolve();
  /** The digest of the guest image's files, worked out on the first move. */
  #imageDigest: Promise<string> | null = null;

  constructor(private readonly opts: QemuDriverOptions) {
    this.#layers = new DiskLayers(opts.dataDir);
    this.#baseSize = statSync(opts.image.rootfs).size;
    this.#templateDisks = new TemplateDiskFiles(opts.dataDir, (id) => this.#standingOn(id));
    const jail = join(opts.dataDir, 'qemu-root');
    prepareJail(jail);
    this.#agents = new AgentPart({ logLevel: opts.logLevel, log: opts.log });
    this.#launcher = new VmLauncher({
      agents: this.#agents,
      image: opts.image,
      accel: opts.accel,
      tscKhz: hostTscKhz(),
      jail,
      cgroups: opts.cgroups,
      bootTimeoutMs: opts.bootTimeoutMs ?? 60_000,
      log: opts.log,
      checkpointRamFile: (id) => join(this.#layers.checkpointDir(id), 'ram'),
      layerFile: (id) => this.#layers.layerFile(id),
      templateDiskFile: (id) => this.#templateDisks.diskFile(id),
    });
    this.#logTimer = setInterval(() => this.#rotateLogs(), LOG_CHECK_MS);
    this.#logTimer.unref();
  }

  /** Starts the agent's process; before it, no VM's agent can be reached. */
  async startAgentProcess(): Promise<void> {
    await this.#agents.start();
  }

  /** The agent's process, for tests and benches that measure or kill it; null while it is started again. */
  get agentPid(): number | null {
    return this.#agents.pid;
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
    return { vcpus: availableParallelism(), memoryMib: hostMemoryLimitMib() };
  }

  async orphanedLayerBytes(runtimeIds: string[], checkpointIds: string[]): Promise<number> {
    return this.#layers.bytesOfOrphanedLayers(runtimeIds, checkpointIds);
  }

  async readConsoleLog(runtimeId: string, maxBytes: number): Promise<ConsoleLog | null> {
    // Synchronous on purpose: see readRotatedLogEnd. A megabyte at most, read from the page cache.
    const end = readRotatedLogEnd(vmPaths(this.runtimeDir(runtimeId)).serialLog, maxBytes);
    return end === null ? null : consoleLogOf(end.bytes, end.truncated);
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
      mkdirSync(dir, { mode: 0o700 });
      fsyncDir(this.#layers.runtimesDir);
      undo.push(() => this.#removeDir(spec.runtimeId));
      // Before anything runs, so that a crash at any point leaves a spare the sweep recognizes.
      if (spare) writeFileSync(join(dir, SPARE_MARKER), '');
      const uid = this.#allocateUid(spec.runtimeId);
      if (spec.fromCheckpointId === null) {
        const template = spec.templateId ?? null;
        if (template !== null && !this.#templateDisks.has(template)) throw failedPrecondition(`template ${template} has no disk on this host`);
        const state: VmState = {
          uid,
          memoryMib: spec.resources.limits.memory_mib,
          vcpus: spec.resources.vcpus,
          tap: spec.tap,
          disk: 0,
          chain: [],
          ...(template === null ? {} : { base: template }),
          ram: 'shared',
          diskSizeBytes: template === null ? this.#baseSize : this.#templateDisks.sizeOf(template),
        };
        // `-F raw`: the backing is raw whatever it holds (a template's disk is an image's bytes).
        const backing = template === null ? this.opts.image.rootfs : this.#templateDisks.diskFile(template);
        await runCommand('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', backing, '-F', 'raw', join(dir, diskFileOf(state))]);
        writeVmState(dir, state);
        await this.#boot(spec, state, undo);
      } else {
        await this.#fork(spec, spec.fromCheckpointId, uid, undo);
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
    await this.#giveIdentity(live.vm, spec.hostname, false);
    await this.setMemoryTarget(spec.runtimeId, spec.resources.requests.memory_mib);
    this.opts.log.info({ runtimeId: spec.runtimeId, how: 'spare', personalizeMs: Math.round(performance.now() - t0) }, 'VM ready');
  }

  async start(spec: VmSpec): Promise<void> {
    const dir = this.runtimeDir(spec.runtimeId);
    const saved = this.#readState(spec.runtimeId);
    this.#admit(spec.resources, false);
    await this.#undoOnFailure(async (undo) => {
      if (saved.suspended !== undefined) {
        // Back from suspension: the same memory, processes and disk, restored from its own files.
        // Its limits are those it was saved with; pending ones wait for a real boot.
        const state: VmState = { ...saved, tap: spec.tap, ram: saved.suspended.ram, suspended: undefined };
        await this.#boot(spec, state, undo, join(dir, SUSPENDED_STATE_FILE));
        writeVmState(dir, state);
        rmSync(join(dir, SUSPENDED_STATE_FILE), { force: true });
        return;
      }
      // A fresh boot gets fresh RAM of its own; a checkpoint's RAM belongs to that snapshot only.
      const state: VmState = { ...saved, memoryMib: spec.resources.limits.memory_mib, vcpus: spec.resources.vcpus, tap: spec.tap, ram: 'shared', balloonMib: undefined };
      rmSync(vmPaths(dir).ram, { force: true });
      writeVmState(dir, state);
      await this.#boot(spec, state, undo);
    });
  }

  async suspend(runtimeId: string): Promise<void> {
    const live = this.#running(runtimeId);
    const dir = this.runtimeDir(runtimeId);
    await live.vm.qmp.execute('stop');
    try {
      await migrateToFile(live.vm.qmp, join(dir, SUSPENDED_STATE_FILE));
      // On disk before vm.json says suspended: after a host crash, a suspended runtime resumes
      // from whole files. (QEMU is stopped: nothing writes its RAM or disk any more.)
      await flushFiles([join(dir, SUSPENDED_STATE_FILE), join(dir, diskFileOf(live.state)), ...(live.state.ram === 'shared' ? [vmPaths(dir).ram] : [])]);
    } catch (err) {
      await live.vm.qmp.execute('cont');
      throw err;
    }
    // A shared RAM file already holds the memory; a private mapping went into the stream.
    this.#saveState(runtimeId, { ...live.state, suspended: { ram: live.state.ram === 'shared' ? 'shared' : null } });
    await this.#end(runtimeId, live.vm);
  }

  async pause(runtimeId: string): Promise<void> {
    await this.#vm(runtimeId).qmp.execute('stop');
  }

  async resume(runtimeId: string): Promise<void> {
    const vm = this.#vm(runtimeId);
    await vm.qmp.execute('cont');
    // Restored paused, its agent has never answered this host: it does once the guest runs.
    if (this.#restoredPaused.delete(runtimeId)) await vm.waitForAgent(RESTORED_AGENT_MS);
    await this.#syncClock(runtimeId, vm);
  }

  /**
   * A stopped QEMU stops the guest's clock too: after a pause of an hour the guest would be an
   * hour behind, and TLS would find fresh certificates not yet valid. Best effort: a guest whose
   * agent does not answer still runs.
   */
  async #syncClock(runtimeId: string, vm: QemuVm): Promise<void> {
    try {
      await (await vm.agent(CLOCK_SYNC_AGENT_MS)).call('syncClock', {}, CLOCK_SYNC_AGENT_MS);
    } catch (err) {
      this.opts.log.warn({ runtimeId, err: (err as Error).message }, 'could not set the guest clock after a pause');
    }
  }

  async stop(runtimeId: string, deadlineMs: number): Promise<void> {
    const live = this.#live.get(runtimeId);
    if (live === undefined) return;
    await live.vm.shutdown(deadlineMs);
    this.#live.delete(runtimeId);
    this.opts.cgroups?.release(runtimeId);
  }

  async destroy(runtimeId: string): Promise<void> {
    this.#spares.delete(runtimeId);
    this.#restoredPaused.delete(runtimeId);
    const vm = this.#live.get(runtimeId)?.vm ?? (await QemuVm.adopt(this.#agents, this.runtimeDir(runtimeId)));
    if (vm !== null) await this.#end(runtimeId, vm);
    this.#removeDir(runtimeId);
    this.#layers.collect();
  }

  guest(runtimeId: string): GuestAgent {
    return new RemoteGuestAgent(() => this.agentOf(runtimeId));
  }

  /** The runtime's agent, as the agent's process reaches it; throws when the runtime has no VM here. */
  agentOf(runtimeId: string): AgentChannel {
    return this.#vm(runtimeId).agentHandle;
  }

  /**
   * The balloon gives the guest `mib` of its memory and returns the rest to the host. A VM whose
   * RAM maps a checkpoint is first moved onto memory of its own: only then can QEMU discard the
   * pages the guest gives up.
   */
  async setMemoryTarget(runtimeId: string, mib: number): Promise<void> {
    let live = this.#running(runtimeId);
    const target = Math.min(mib, live.state.memoryMib);
    if (target === balloonOf(live.state)) return;
    // Deflating discards nothing, so any VM may; inflating needs memory QEMU can discard.
    if (target < balloonOf(live.state) && mapsCheckpoint(live.state)) live = await this.#moveToOwnMemory(runtimeId, live);
    await live.vm.qmp.execute('balloon', { value: target * MiB });
    this.#saveState(runtimeId, { ...live.state, balloonMib: target });
  }

  /**
   * Waits until the guest has given its balloon all it was asked for. A template is captured only
   * then: a fork that found its balloon still on the way would go on inflating on its
   * checkpoint's read-only memory, writing every page it gives up. Fails when the guest stops
   * making progress short of the target (it cannot give up that much).
   */
  async #settleBalloon(vm: QemuVm, targetMib: number): Promise<void> {
    const deadline = Date.now() + BALLOON_SETTLE_MS;
    let last = Infinity;
    let still = 0;
    for (;;) {
      const actualMib = (await vm.qmp.execute<{ actual: number }>('query-balloon')).actual / MiB;
      if (actualMib <= targetMib) return;
      still = actualMib < last ? 0 : still + 1;
      last = Math.min(last, actualMib);
      if (still >= 50 || Date.now() > deadline) {
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
    const stream = join(dir, MOVE_STATE_FILE);
    rmSync(stream, { force: true });
    const t0 = performance.now();
    await live.vm.qmp.execute('stop');
    try {
      await migrateToFile(live.vm.qmp, stream);
    } catch (err) {
      await live.vm.qmp.execute('cont');
      throw err;
    }
    const t1 = performance.now();
    await this.#end(runtimeId, live.vm);
    const state: VmState = { ...live.state, ram: null };
    try {
      await this.#undoOnFailure(async (undo) => {
        const vm = await this.#launch(runtimeId, runtimeId, state, undo, stream);
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
   * Pauses the VM, freezes its disk into the checkpoint's layer, saves device state and RAM, and
   * puts the VM back as it was (checkpoint-capture.ts).
   */
  async checkpoint(runtimeId: string, checkpointId: string): Promise<{ bytes: number }> {
    const live = this.#running(runtimeId);
    const { vm } = live;
    const runState = (await vm.qmp.execute<{ status: string }>('query-status')).status;
    const wasRunning = runState === 'running';
    if (runState === 'postmigrate') {
      // Block nodes stay inactive after an earlier capture until the VM runs again.
      await vm.qmp.execute('cont');
      await vm.qmp.execute('stop');
    } else if (wasRunning) {
      await vm.qmp.execute('stop');
    }
    // The VM runs again as soon as what needs it paused is captured; the files are finished meanwhile.
    let resumed: Promise<void> | null = null;
    const resume = () => (resumed ??= wasRunning ? vm.qmp.execute('cont').then(() => this.#syncClock(runtimeId, vm)) : Promise.resolve());
    try {
      const paused = await captureCheckpoint({
        vm,
        dir: this.runtimeDir(runtimeId),
        state: live.state,
        checkpointId,
        layers: this.#layers,
        qemuVersion: this.opts.qemuVersion,
        recordState: (next) => this.#saveState(runtimeId, next),
      });
      // Both settle before either failure is acted on, so nothing writes into a checkpoint being removed.
      const [finished, back] = await Promise.allSettled([paused.finish(), resume()]);
      if (finished.status === 'rejected') throw finished.reason;
      if (back.status === 'rejected') throw back.reason;
      const capture = finished.value;
      for (const [id, digest] of Object.entries(capture.manifest.digests.layers)) this.#verifiedLayers.set(id, digest);
      return { bytes: capture.bytes };
    } catch (err) {
      rmSync(this.#layers.checkpointDir(checkpointId), { recursive: true, force: true });
      this.#layers.collect();
      throw err;
    } finally {
      await resume();
    }
  }

  async captureDisk(runtimeId: string, checkpointId: string, shape: { memoryMib: number; vcpus: number }): Promise<void> {
    const dir = this.runtimeDir(runtimeId);
    // Its disk must be still: no QEMU of it at all, even one that stopped answering.
    if (this.#live.has(runtimeId) || QemuVm.processOf(dir) !== null) throw failedPrecondition('a QEMU of the runtime still runs; stop or delete it first');
    const state = this.#readState(runtimeId);
    // Its memory is in its own files (a resume from suspension that failed): the disk alone is not the runtime.
    if (state.suspended !== undefined) throw failedPrecondition('the runtime holds a saved suspension; start it, then move it');
    try {
      await captureStoppedDisk({ dir, state, checkpointId, layers: this.#layers, qemuVersion: this.opts.qemuVersion, shape });
    } catch (err) {
      await this.deleteCheckpoint(checkpointId);
      throw err;
    }
  }

  async adoptDisk(runtimeId: string, checkpointId: string): Promise<void> {
    const read = this.#layers.readManifest(checkpointId);
    if ('problem' in read) throw failedPrecondition(`checkpoint ${checkpointId} cannot be taken: ${read.problem}`);
    const { manifest } = read;
    const dir = this.runtimeDir(runtimeId);
    await this.#undoOnFailure(async (undo) => {
      mkdirSync(dir, { mode: 0o700 });
      fsyncDir(this.#layers.runtimesDir);
      undo.push(() => this.#removeDir(runtimeId));
      const state: VmState = {
        uid: this.#allocateUid(runtimeId),
        memoryMib: manifest.memoryMib,
        vcpus: manifest.vcpus,
        tap: null,
        disk: 0,
        chain: manifest.chain,
        ram: 'shared',
        diskSizeBytes: manifest.diskSizeBytes,
      };
      await createOverlay(this.#layers.layerFile(manifest.chain[0]!), join(dir, diskFileOf(state)), manifest.diskSizeBytes);
      // On disk before the move commits: no QEMU flushes it before the runtime's next start.
      fsyncFile(join(dir, diskFileOf(state)));
      writeVmState(dir, state);
    });
  }

  /**
   * Checks the checkpoint's files against the digests its manifest recorded when it became
   * ready. Layers are shared by many checkpoints and checked once per service start.
   */
  async verifyCheckpoint(checkpointId: string): Promise<string | null> {
    const read = this.#layers.readManifest(checkpointId);
    if ('problem' in read) return read.problem;
    const { manifest } = read;
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

  async heldCheckpointIds(): Promise<string[]> {
    return readdirSync(this.#layers.checkpointsDir).filter((name) => UUID.test(name));
  }

  async describeCheckpoint(checkpointId: string): Promise<CheckpointDescription> {
    const manifest = this.#manifestToMove(checkpointId);
    // In the order an import takes them (checkpoint-import.ts): the chain, then device state and RAM.
    const files = [...manifest.chain, 'state', ...(manifest.hasRam ? ['ram'] : [])];
    return { manifest, image: await this.#imageContent(), files };
  }

  async readCheckpointFile(checkpointId: string, file: string): Promise<Readable> {
    const manifest = this.#manifestToMove(checkpointId);
    const dir = this.#layers.checkpointDir(checkpointId);
    // Only what its manifest names: the chain's layers by id, never a path.
    const path = file === 'state' || (file === 'ram' && manifest.hasRam) ? join(dir, file) : manifest.chain.includes(file) ? this.#layers.layerFile(file) : null;
    if (path === null) throw invalidArgument(`checkpoint ${checkpointId} has no file '${file}'`);
    return sparseFrames(path);
  }

  async importCheckpoint(checkpointId: string, source: RemoteCheckpoint, expected: { memoryMib: number; vcpus: number }): Promise<void> {
    const imageDigest = await this.#imageContent();
    const run = this.#imports.then(async () => {
      // A copy left here (a move back after a drop that never came) is used only if it is intact.
      if (existsSync(this.#layers.manifestFile(checkpointId)) && (await this.verifyCheckpoint(checkpointId)) !== null) await this.deleteCheckpoint(checkpointId);
      await importCheckpoint({
        checkpointId,
        source,
        layers: this.#layers,
        qemuVersion: this.opts.qemuVersion,
        imageDigest,
        layerVerified: (id, digest) => this.#verifiedLayers.get(id) === digest,
        expected,
      });
    });
    this.#imports = run.catch(() => undefined);
    try {
      await run;
    } catch (err) {
      this.#layers.collect();
      throw err;
    }
    const read = this.#layers.readManifest(checkpointId);
    // Each file was checked against its digest on its way in.
    if (!('problem' in read)) for (const [id, digest] of Object.entries(read.manifest.digests.layers)) this.#verifiedLayers.set(id, digest);
  }

  #manifestToMove(checkpointId: string): CheckpointManifest {
    const read = this.#layers.readManifest(checkpointId);
    if ('problem' in read) throw failedPrecondition(`checkpoint ${checkpointId} cannot be moved: ${read.problem}`);
    return read.manifest;
  }

  #imageContent(): Promise<string> {
    this.#imageDigest ??= imageContentDigest(this.opts.image);
    return this.#imageDigest;
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
    await this.guest(runtimeId).writeFile(GUEST_CA_FILE, Readable.from([Buffer.from(this.opts.guestCaPem)]), 1 << 20);
    const profile = Object.entries(GUEST_CA_ENV).map(([k, v]) => `export ${k}=${v}`).join('; ');
    const result = await runBuffered(this.guest(runtimeId), {
      // Constant paths only, no quoting needed.
      command: `cat ${GUEST_CA_FILE} >> ${GUEST_CA_ENV.SSL_CERT_FILE} && ln -sf ${GUEST_CA_FILE} /etc/ssl/certs/vessel-egress-ca.pem && echo '${profile}' > /etc/profile.d/vessel-ca.sh`,
      args: [], cwd: null, env: {}, user: null, stdin: null, maxOutputBytes: 4096, timeoutSecs: 60,
    });
    if (result.exit_code !== 0) throw new Error(`could not install the gateway CA in the guest: ${result.stderr.trim()}`);
  }

  async reattach(runtimeId: string): Promise<LiveState> {
    // A new API process (the last one crashed) asks for VMs this process still holds: QMP takes
    // one client, and that is the one held.
    const held = this.#live.get(runtimeId);
    if (held !== undefined && !held.vm.exited) return held.vm.status();
    const dir = this.runtimeDir(runtimeId);
    const vm = await QemuVm.adopt(this.#agents, dir);
    if (vm === null) return 'gone';
    let state: VmState;
    try {
      state = readVmState(dir);
    } catch (err) {
      // A VM whose state is unknown cannot be managed safely (its disk, its memory): it goes.
      await vm.kill();
      throw new Error(`it was stopped: ${(err as Error).message}`);
    }
    this.#track(runtimeId, { vm, state });
    return vm.status();
  }

  // ---- TemplateDisks ----
  importTemplateDisk(templateId: string, sizeBytes: number, chunks: AsyncIterable<DiskChunk>): Promise<void> {
    return this.#templateDisks.importDisk(templateId, sizeBytes, chunks);
  }

  async deleteTemplateDisk(templateId: string): Promise<void> {
    this.#templateDisks.deleteDisk(templateId);
  }

  /** The runtimes and checkpoints whose chain bottoms on the template's disk, counted; null when none does. */
  #standingOn(templateId: string): string | null {
    let runtimes = 0;
    for (const id of readdirSync(this.#layers.runtimesDir)) {
      try {
        if (readVmState(this.runtimeDir(id)).base === templateId) runtimes++;
      } catch {
        // A directory without a readable state boots nothing.
      }
    }
    let checkpoints = 0;
    for (const id of readdirSync(this.#layers.checkpointsDir)) {
      if (!UUID.test(id)) continue;
      const read = this.#layers.readManifest(id);
      if ('manifest' in read && read.manifest.base === templateId) checkpoints++;
    }
    if (runtimes === 0 && checkpoints === 0) return null;
    return [runtimes > 0 ? `${runtimes} runtime${runtimes === 1 ? '' : 's'}` : '', checkpoints > 0 ? `${checkpoints} checkpoint${checkpoints === 1 ? '' : 's'}` : ''].filter((s) => s !== '').join(' and ');
  }

  async runtimeIds(): Promise<string[]> {
    return readdirSync(this.#layers.runtimesDir).filter((id) => !id.startsWith(TEMPLATE_PREFIX) && !existsSync(join(this.runtimeDir(id), SPARE_MARKER)));
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
    clearInterval(this.#logTimer);
    for (const { vm } of this.#live.values()) vm.detach();
    this.#live.clear();
    await this.#agents.close();
  }

  /**
   * Capacity, counted two ways. The sum of live limits may not pass host memory times the
   * overcommit factor; and the memory the host really has free (MemAvailable, less a reserve)
   * must cover what the new VM will hold at once: its whole limit for a cold boot, but only a
   * fork's private pages for a restore, since forks share their checkpoint's RAM file.
   */
  #admit(resources: Resources, fork: boolean): void {
    const want = resources.limits.memory_mib;
    const ceiling = hostMemoryLimitMib() * this.opts.memoryOvercommit;
    let committed = 0;
    for (const v of this.#live.values()) committed += v.state.memoryMib;
    if (committed + want > ceiling) {
      throw unavailable(`not enough host memory: ${want} MiB requested, ${Math.max(0, Math.floor(ceiling - committed))} MiB left under the overcommit limit`);
    }
    const free = availableMib() - HOST_RESERVE_MIB;
    const need = fork ? Math.min(want, FORK_FOOTPRINT_MIB) : want;
    if (free < need) throw unavailable(`not enough free host memory: ${need} MiB needed, ${Math.max(0, Math.floor(free))} MiB free`);
  }

  async #fork(spec: VmSpec, checkpointId: string, uid: number, undo: Teardown): Promise<void> {
    const read = this.#layers.readManifest(checkpointId);
    if ('problem' in read) throw failedPrecondition(`checkpoint ${checkpointId} cannot be forked: ${read.problem}`);
    const { manifest } = read;
    const dir = this.runtimeDir(spec.runtimeId);
    const state: VmState = {
      uid,
      memoryMib: manifest.memoryMib,
      vcpus: manifest.vcpus,
      tap: spec.tap,
      disk: 0,
      chain: manifest.chain,
      ...(manifest.base === undefined ? {} : { base: manifest.base }),
      ram: manifest.hasRam ? { checkpoint: checkpointId } : null,
      diskSizeBytes: manifest.diskSizeBytes,
      ...(manifest.balloonMib < manifest.memoryMib ? { balloonMib: manifest.balloonMib } : {}),
    };
    await createOverlay(this.#layers.layerFile(manifest.chain[0]!), join(dir, diskFileOf(state)), manifest.diskSizeBytes);
    writeVmState(dir, state);
    await this.#boot({ ...spec, resources: { ...spec.resources, limits: { memory_mib: manifest.memoryMib }, vcpus: manifest.vcpus } }, state, undo, join(this.#layers.checkpointDir(checkpointId), 'state'));
  }

  /** Starts QEMU for the runtime and gives the guest its identity and its memory request. */
  async #boot(spec: VmSpec, state: VmState, undo: Teardown, restoreFrom?: string): Promise<void> {
    const t0 = performance.now();
    const paused = restoreFrom !== undefined && spec.paused === true;
    const vm = await this.#launch(spec.runtimeId, spec.hostname, state, undo, restoreFrom, paused);
    const t1 = performance.now();
    // Restored as it was, name and balloon included; resume() sets its clock when it runs.
    if (paused) {
      this.#restoredPaused.add(spec.runtimeId);
      return void this.opts.log.info({ runtimeId: spec.runtimeId, how: 'restore, paused', vmMs: Math.round(t1 - t0) }, 'VM ready');
    }
    // Entropy (with the kernel's generator reseeded), clock and hostname: until then a fork is
    // its checkpoint's twin.
    await this.#giveIdentity(vm, spec.hostname, true);
    // A fork of a template made for this request already has its balloon there.
    await this.setMemoryTarget(spec.runtimeId, spec.resources.requests.memory_mib);
    const ms = (x: number) => Math.round(x);
    this.opts.log.info({ runtimeId: spec.runtimeId, how: restoreFrom === undefined ? 'boot' : 'restore', vmMs: ms(t1 - t0), personalizeMs: ms(performance.now() - t1) }, 'VM ready');
  }

  async #launch(runtimeId: string, name: string, state: VmState, undo: Teardown, restoreFrom?: string, paused = false): Promise<QemuVm> {
    const vm = await this.#launcher.launch(runtimeId, this.runtimeDir(runtimeId), name, state, undo, restoreFrom, paused);
    this.#track(runtimeId, { vm, state });
    this.#saveState(runtimeId, state);
    return vm;
  }

  #track(runtimeId: string, live: LiveVm): void {
    this.#live.set(runtimeId, live);
    live.vm.onExit((expected) => {
      if (this.#live.get(runtimeId)?.vm === live.vm) this.#live.delete(runtimeId);
      if (!expected) {
        this.opts.log.warn({ runtimeId, pid: live.vm.pid }, 'QEMU exited unexpectedly');
        this.opts.cgroups?.release(runtimeId);
        this.#onExit(runtimeId);
      }
    });
  }

  /** Kills the VM's QEMU on purpose and lets go of it. */
  async #end(runtimeId: string, vm: QemuVm): Promise<void> {
    await vm.kill();
    if (this.#live.get(runtimeId)?.vm === vm) this.#live.delete(runtimeId);
    this.opts.cgroups?.release(runtimeId);
  }

  /** The runtime's state from its file; a damaged one is a clear failed_precondition. */
  #readState(runtimeId: string): VmState {
    try {
      return readVmState(this.runtimeDir(runtimeId));
    } catch (err) {
      if (err instanceof VmStateError) throw failedPrecondition(`the runtime cannot be started: ${err.message}`);
      throw err;
    }
  }

  /** Writes the state file durably and keeps the live copy in step. */
  #saveState(runtimeId: string, state: VmState): void {
    writeVmState(this.runtimeDir(runtimeId), state);
    const live = this.#live.get(runtimeId);
    if (live !== undefined) live.state = state;
  }

  #removeDir(runtimeId: string): void {
    rmSync(this.runtimeDir(runtimeId), { recursive: true, force: true });
    this.#uids?.delete(runtimeId);
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

  /**
   * Entropy (the guest's generator reseeded), the clock unless `setClock` is false, and the
   * hostname, applied by the agent itself (guest-identity.ts, in the agent's process); the VM is
   * ready only once the guest has.
   */
  async #giveIdentity(vm: QemuVm, hostname: string, setClock: boolean): Promise<void> {
    await (await vm.agent()).call('giveIdentity', { hostname, setClock });
  }

  /**
   * A uid of the runtime's own for as long as its directory exists, so that no two QEMUs, and no
   * QEMU and a former one's leftovers, ever share one. Chosen at random among the free ones.
   */
  #allocateUid(runtimeId: string): number {
    if (this.#uids === null) {
      this.#uids = new Map();
      for (const id of readdirSync(this.#layers.runtimesDir)) {
        try {
          this.#uids.set(id, readVmState(this.runtimeDir(id)).uid);
        } catch {
          // a directory being made, or one whose state is damaged: it holds no uid we can know
        }
      }
    }
    const used = new Set(this.#uids.values());
    const start = randomInt(UID_RANGE);
    for (let i = 0; i < UID_RANGE; i++) {
      const uid = UID_BASE + ((start + i) % UID_RANGE);
      if (used.has(uid)) continue;
      this.#uids.set(runtimeId, uid);
      return uid;
    }
    throw unavailable('no free uid for another VM');
  }

  /** Every runtime directory's logs, not only those of VMs already up: a guest writes its console from its first instruction. */
  #rotateLogs(): void {
    for (const runtimeId of readdirSync(this.#layers.runtimesDir)) {
      const paths = vmPaths(this.runtimeDir(runtimeId));
      for (const log of [paths.serialLog, paths.qemuLog]) {
        try {
          if (rotateLog(log)) this.opts.log.warn({ runtimeId, log }, 'log cut at its size limit');
        } catch (err) {
          this.opts.log.warn({ runtimeId, log, err: (err as Error).message }, 'could not cut a log');
        }
      }
    }
  }
}

function readFileSafe(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

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
