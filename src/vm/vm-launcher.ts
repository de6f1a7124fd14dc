/**
 * Starts the QEMU of a runtime from its state: a cold boot, or a restore of a migration stream.
 *
 * Every file QEMU uses is opened here, by root, and handed over as a descriptor: the top disk
 * overlay (one read-write and one read-only descriptor, in the overlay's fd set), the stream to
 * restore, the TAP, and the disk's backing chain, each named on the command line (never by a qcow2
 * header, which the guest's QEMU could have written). QEMU opens the rest (kernel, RAM file, sockets, console log)
 * as root during its start-up, then drops to the runtime's own uid, chrooted into an empty
 * directory, in a network namespace of its own and in the runtime's cgroup. Nothing it could
 * reach afterwards belongs to anyone but root, and root never follows a path it could have made.
 */
import { closeSync, chmodSync, chownSync, constants, mkdirSync, openSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Accel } from './accel.js';
import type { VmCgroups, VmLimits } from './cgroups.js';
import type { GuestImage } from './guest-image.js';
import { INCOMING_FDSET, migrateFromFdset } from './migration.js';
import { qcow2HeaderProblem } from './qcow2-header.js';
import { qemuArgs, type BackingNode } from './qemu-args.js';
import type { AgentPart } from './agent-part.js';
import { QemuVm, vmPaths } from './qemu-vm.js';
import type { Teardown } from './teardown.js';
import { diskFileOf, diskNodeOf, type VmState } from './vm-state.js';
import { openTap } from './vm-ops.js';

const MiB = 1024 * 1024;
/** A disk overlay `disk-<n>` keeps its descriptors in fd set DISK_FDSET_BASE + n (INCOMING_FDSET is 1). */
export const DISK_FDSET_BASE = 100;
/** The backing chain's files, bottom first, in fd sets BACKING_FDSET_BASE + position. */
const BACKING_FDSET_BASE = 10_000;
/** QEMU's own memory beside the guest's: the TCG translation cache (64 MiB), its heap and threads. */
const QEMU_OVERHEAD_MIB = 256;
/** QEMU's threads: main loop, one per vCPU, I/O and migration workers, with room to spare. */
const QEMU_MAX_PIDS = 256;

export interface VmLauncherOptions {
  image: GuestImage;
  accel: Accel;
  tscKhz: number | null;
  /** An empty directory of root's, QEMU's root once it has started. */
  jail: string;
  /** A template's root disk (template-disks.ts), the bottom of its runtimes' chains. */
  templateDiskFile: (templateId: string) => string;
  cgroups: VmCgroups | null;
  bootTimeoutMs: number;
  /** Where a checkpoint's RAM file is, for forks that map it. */
  checkpointRamFile: (checkpointId: string) => string;
  /** Where a checkpoint's disk layer is, for the disks that stand on it. */
  layerFile: (checkpointId: string) => string;
  /** The agent's process, which each VM's agent connection is handed to. */
  agents: AgentPart;
  log: { warn(o: object, m: string): void };
}

export const diskFdset = (state: Pick<VmState, 'disk'>): number => DISK_FDSET_BASE + state.disk;

/** Opens a runtime file for QEMU: never through a symlink (and, like every open of Node's, close-on-exec: only spawn's stdio hands it over). */
export const openForQemu = (path: string, writable: boolean): number =>
  openSync(path, (writable ? constants.O_RDWR : constants.O_RDONLY) | constants.O_NOFOLLOW);

/** Opens a qcow2 image for QEMU, once its header (read through the same descriptor) asks for nothing QEMU would open by name. */
function openQcow2ForQemu(path: string, writable: boolean): number {
  const fd = openForQemu(path, writable);
  const problem = qcow2HeaderProblem(fd);
  if (problem === null) return fd;
  closeSync(fd);
  throw new Error(`${path} ${problem}; it is not handed to QEMU`);
}

/** Makes the empty directory QEMU is chrooted into: root's, and nothing in it. */
export function prepareJail(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o555 });
  chownSync(dir, 0, 0);
  chmodSync(dir, 0o555);
  if (readdirSync(dir).length > 0) throw new Error(`${dir} must be empty: QEMU is chrooted into it`);
}

export class VmLauncher {
  constructor(private readonly opts: VmLauncherOptions) {}

  /**
   * Starts QEMU for the runtime in `dir` and waits until its guest agent answers. `restoreFrom`
   * is a migration stream to load instead of booting. Registers the undo of everything it starts.
   */
  async launch(runtimeId: string, dir: string, name: string, state: VmState, undo: Teardown, restoreFrom?: string, paused = false): Promise<QemuVm> {
    const paths = vmPaths(dir);
    for (const f of [paths.qmpSocket, paths.agentSocket, paths.pidFile, paths.serialLog, `${paths.serialLog}.1`]) rmSync(f, { force: true });
    // Directories of an earlier layout belonged to the VM's uid; nothing of a runtime does now.
    chownSync(dir, 0, 0);
    chmodSync(dir, 0o700);
    this.opts.cgroups?.prepare(runtimeId, this.#limits(state));
    undo.push(() => this.opts.cgroups?.release(runtimeId));

    const inherited: number[] = [];
    const pass = (fd: number): number => inherited.push(fd) + 2; // QEMU's number: 3 onwards
    try {
      const fdsets: Array<{ fd: number; set: number }> = [];
      if (restoreFrom !== undefined) fdsets.push({ fd: pass(openForQemu(restoreFrom, false)), set: INCOMING_FDSET });
      const disk = join(dir, diskFileOf(state));
      for (const writable of [true, false]) fdsets.push({ fd: pass(openQcow2ForQemu(disk, writable)), set: diskFdset(state) });
      // The chain, bottom first: the raw root filesystem, then the layers (`chain` is newest first).
      // A template's root disk is raw too, whatever its bytes: nothing in it can name a file.
      const backing: BackingNode[] = [{ node: 'rootfs', fdset: BACKING_FDSET_BASE, format: 'raw' }];
      fdsets.push({ fd: pass(openForQemu(state.base === undefined ? this.opts.image.rootfs : this.opts.templateDiskFile(state.base), false)), set: BACKING_FDSET_BASE });
      [...state.chain].reverse().forEach((layerId, i) => {
        const set = BACKING_FDSET_BASE + 1 + i;
        backing.push({ node: `layer-${i}`, fdset: set, format: 'qcow2' });
        fdsets.push({ fd: pass(openQcow2ForQemu(this.opts.layerFile(layerId), false)), set });
      });
      const tapFd = state.tap === null ? null : pass(openTap(state.tap));
      const args = qemuArgs({
        accel: this.opts.accel,
        kernel: this.opts.image.kernel,
        initrd: this.opts.image.initrd,
        disk: { node: diskNodeOf(state), fdset: diskFdset(state) },
        backing,
        memory: state.ram === 'shared' ? { file: paths.ram, shared: true } : state.ram === null ? null : { file: this.opts.checkpointRamFile(state.ram.checkpoint), shared: false },
        fdsets,
        incoming: restoreFrom !== undefined,
        qmpSocket: paths.qmpSocket,
        agentSocket: paths.agentSocket,
        serialLog: paths.serialLog,
        memoryMib: state.memoryMib,
        vcpus: state.vcpus,
        name,
        runAs: `${state.uid}:${state.uid}`,
        chroot: this.opts.jail,
        tscKhz: this.opts.tscKhz,
        tapFd,
      });
      const onSpawn = (pid: number) => this.opts.cgroups?.attach(runtimeId, pid);
      return restoreFrom === undefined ? await this.#bootUntilAgent(dir, args, inherited, onSpawn, undo) : await this.#restore(dir, args, inherited, onSpawn, undo, paused);
    } finally {
      // QEMU has its own copies now.
      for (const fd of inherited) closeSync(fd);
    }
  }

  #limits(state: VmState): VmLimits {
    return { memoryBytes: (state.memoryMib + QEMU_OVERHEAD_MIB) * MiB, cpuCores: state.vcpus + 1, pids: QEMU_MAX_PIDS };
  }

  async #restore(dir: string, args: string[], inherited: number[], onSpawn: (pid: number) => void, undo: Teardown, paused: boolean): Promise<QemuVm> {
    const vm = await QemuVm.launch(this.opts.agents, dir, args, inherited, onSpawn);
    undo.push(() => vm.kill());
    await migrateFromFdset(vm.qmp);
    if (paused) return vm;
    await vm.qmp.execute('cont');
    await vm.waitForAgent(30_000);
    return vm;
  }

  /**
   * Under TCG a guest very rarely stalls before its first console line; a second boot of the
   * same disk is cheaper than failing the create, so one retry is allowed.
   */
  async #bootUntilAgent(dir: string, args: string[], inherited: number[], onSpawn: (pid: number) => void, undo: Teardown): Promise<QemuVm> {
    for (let attempt = 1; ; attempt++) {
      const vm = await QemuVm.launch(this.opts.agents, dir, args, inherited, onSpawn);
      undo.push(() => vm.kill());
      try {
        await vm.waitForAgent(this.opts.bootTimeoutMs);
        return vm;
      } catch (err) {
        await vm.kill();
        if (attempt >= 2) throw err;
        this.opts.log.warn({ dir, err: (err as Error).message }, 'guest did not come up; booting it once more');
      }
    }
  }
}
