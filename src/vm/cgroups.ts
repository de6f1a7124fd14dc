/**
 * One cgroup per VM, so that a QEMU (and whatever a guest makes it do) is held to its memory, CPU
 * and process limits by the kernel. Both layouts are supported and detected at start:
 * - cgroup v2 (a stock Debian host): `<root>/vessel/<instance>/<runtime>` with memory.max,
 *   cpu.max and pids.max, the controllers enabled in the parents' cgroup.subtree_control;
 * - cgroup v1 (some container hosts): `<root>/<controller>/vessel/<instance>/<runtime>` for the
 *   memory, cpu and pids hierarchies, with memory.limit_in_bytes, cpu.cfs_quota_us and pids.max.
 * `<instance>` names the service (its data directory): two on one machine, such as a fleet's
 * hosts in a test, each keep their own, also for one runtime that moves from one to the other.
 * A host with neither gets none, and says so once.
 */
import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';

export const CGROUP_ROOT = '/sys/fs/cgroup';
const PARENT = 'vessel';
const CONTROLLERS = ['memory', 'cpu', 'pids'] as const;
const CPU_PERIOD_US = 100_000;

export interface VmLimits {
  /** The most memory its QEMU may hold, guest RAM and QEMU's own together. */
  memoryBytes: number;
  /** CPU time per period, in cores (1.5 = one and a half cores' worth). */
  cpuCores: number;
  /** Processes and threads. */
  pids: number;
}

type Controller = (typeof CONTROLLERS)[number];
type Layout = { version: 2; dir: string } | { version: 1; dirs: Record<Controller, string> };

const readSafe = (path: string): string => {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
};

export class VmCgroups {
  private constructor(private readonly layout: Layout) {}

  /** The cgroups of this host, or null (with the reason) when VMs cannot be put in any. */
  static detect(instance: string, root = CGROUP_ROOT): { cgroups: VmCgroups } | { cgroups: null; reason: string } {
    const v2 = readSafe(join(root, 'cgroup.controllers')).split(/\s+/);
    if (CONTROLLERS.every((c) => v2.includes(c))) {
      try {
        const dir = join(root, PARENT, instance);
        mkdirSync(dir, { recursive: true });
        const enable = CONTROLLERS.map((c) => `+${c}`).join(' ');
        for (const parent of [root, join(root, PARENT), dir]) writeFileSync(join(parent, 'cgroup.subtree_control'), enable);
        return { cgroups: new VmCgroups({ version: 2, dir }) };
      } catch (err) {
        return { cgroups: null, reason: `cgroup v2 at ${root}, but its controllers cannot be delegated: ${(err as Error).message}` };
      }
    }
    const v1 = { memory: join(root, 'memory'), cpu: join(root, 'cpu'), pids: join(root, 'pids') };
    if (CONTROLLERS.every((c) => existsSync(join(v1[c], 'cgroup.procs')))) {
      try {
        const dirs = { memory: join(v1.memory, PARENT, instance), cpu: join(v1.cpu, PARENT, instance), pids: join(v1.pids, PARENT, instance) };
        for (const c of CONTROLLERS) mkdirSync(dirs[c], { recursive: true });
        return { cgroups: new VmCgroups({ version: 1, dirs }) };
      } catch (err) {
        return { cgroups: null, reason: `cgroup v1 at ${root}, but no cgroup can be made there: ${(err as Error).message}` };
      }
    }
    return { cgroups: null, reason: `no memory, cpu and pids controllers at ${root} (neither cgroup v1 nor v2)` };
  }

  get version(): 1 | 2 {
    return this.layout.version;
  }

  /** Makes (or updates) the VM's cgroup with these limits; call before its QEMU starts. */
  prepare(runtimeId: string, limits: VmLimits): void {
    const quota = Math.max(1000, Math.round(limits.cpuCores * CPU_PERIOD_US));
    if (this.layout.version === 2) {
      const dir = join(this.layout.dir, runtimeId);
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, 'memory.max'), String(limits.memoryBytes));
      // The host has no swap to give; a VM over its limit is reclaimed, then killed, alone.
      if (existsSync(join(dir, 'memory.swap.max'))) writeFileSync(join(dir, 'memory.swap.max'), '0');
      writeFileSync(join(dir, 'cpu.max'), `${quota} ${CPU_PERIOD_US}`);
      writeFileSync(join(dir, 'pids.max'), String(limits.pids));
      return;
    }
    const d = this.#v1Dirs(runtimeId);
    for (const dir of Object.values(d)) mkdirSync(dir, { recursive: true });
    writeFileSync(join(d.memory, 'memory.limit_in_bytes'), String(limits.memoryBytes));
    writeFileSync(join(d.cpu, 'cpu.cfs_period_us'), String(CPU_PERIOD_US));
    writeFileSync(join(d.cpu, 'cpu.cfs_quota_us'), String(quota));
    writeFileSync(join(d.pids, 'pids.max'), String(limits.pids));
  }

  /** Moves a process, all its threads with it, into the VM's cgroup. */
  attach(runtimeId: string, pid: number): void {
    const dirs = this.layout.version === 2 ? [join(this.layout.dir, runtimeId)] : Object.values(this.#v1Dirs(runtimeId));
    for (const dir of dirs) writeFileSync(join(dir, 'cgroup.procs'), String(pid));
  }

  /** Removes the VM's cgroup once its QEMU has exited. A cgroup that still holds a process stays. */
  release(runtimeId: string): void {
    const dirs = this.layout.version === 2 ? [join(this.layout.dir, runtimeId)] : Object.values(this.#v1Dirs(runtimeId));
    // And where a VM started before cgroups were per instance has its own (`vessel/<runtime>`).
    for (const dir of [...dirs, ...dirs.map((d) => join(dirname(dirname(d)), runtimeId))]) {
      try {
        rmdirSync(dir);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
      }
    }
  }

  #v1Dirs(runtimeId: string): Record<Controller, string> {
    if (this.layout.version !== 1) throw new Error('not cgroup v1');
    const dirs = this.layout.dirs;
    return { memory: join(dirs.memory, runtimeId), cpu: join(dirs.cpu, runtimeId), pids: join(dirs.pids, runtimeId) };
  }
}
