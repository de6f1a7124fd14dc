/**
 * The QEMU implementation of the core's VmDriver port: one detached QEMU `microvm` per runtime,
 * a qcow2 overlay on the shared read-only guest image, QMP for the machine and the guest agent
 * for everything inside it.
 */
import { existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { totalmem } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { VesselError, failedPrecondition, unavailable } from '../core/errors.js';
import type { LiveState, VmDriver, VmSpec } from '../core/ports.js';
import type { ExecRequest, ExecResult } from '../core/types.js';
import { hostTscKhz, type Accel } from './accel.js';
import { GuestAgentError, type GuestAgentClient } from './guest-agent-client.js';
import { execInGuest } from './guest-exec.js';
import { readGuestFile, writeGuestFile } from './guest-files.js';
import type { GuestImage } from './guest-image.js';
import { qemuArgs } from './qemu-args.js';
import { QemuVm, vmPaths } from './qemu-vm.js';
import { runCommand } from './run-command.js';
import { Teardown } from './teardown.js';

export interface QemuDriverOptions {
  dataDir: string;
  image: GuestImage;
  accel: Accel;
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

interface LiveVm {
  vm: QemuVm;
  memoryMib: number;
  uid: number;
}

export class QemuDriver implements VmDriver {
  readonly #live = new Map<string, LiveVm>();
  readonly #tscKhz = hostTscKhz();
  #onExit: (runtimeId: string) => void = () => undefined;

  constructor(private readonly opts: QemuDriverOptions) {
    mkdirSync(join(opts.dataDir, 'runtimes'), { recursive: true });
  }

  unavailableReason(): string | null {
    return null;
  }

  runtimeDir(runtimeId: string): string {
    return join(this.opts.dataDir, 'runtimes', runtimeId);
  }

  async create(spec: VmSpec): Promise<void> {
    if (spec.fromCheckpointId !== null) throw new VesselError('unimplemented', 'forking from a checkpoint is not supported by this driver yet');
    this.#admit(spec);
    const dir = this.runtimeDir(spec.runtimeId);
    const undo = new Teardown();
    try {
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      undo.push(() => rmSync(dir, { recursive: true, force: true }));
      await runCommand('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', this.opts.image.rootfs, '-F', 'raw', vmPaths(dir).disk]);
      await this.#boot(spec, undo);
    } catch (err) {
      await undo.run();
      throw err;
    }
  }

  async start(spec: VmSpec): Promise<void> {
    const dir = this.runtimeDir(spec.runtimeId);
    if (!existsSync(vmPaths(dir).disk)) throw failedPrecondition('the runtime has no disk left to boot');
    this.#admit(spec);
    const undo = new Teardown();
    try {
      await this.#boot(spec, undo);
    } catch (err) {
      await undo.run();
      throw err;
    }
  }

  async pause(runtimeId: string): Promise<void> {
    await this.#vm(runtimeId).qmp.execute('stop');
  }

  async resume(runtimeId: string): Promise<void> {
    await this.#vm(runtimeId).qmp.execute('cont');
  }

  async stop(runtimeId: string, deadlineMs: number): Promise<void> {
    const live = this.#live.get(runtimeId);
    if (live === undefined) return;
    await live.vm.shutdown(deadlineMs);
    this.#live.delete(runtimeId);
  }

  async destroy(runtimeId: string): Promise<void> {
    const dir = this.runtimeDir(runtimeId);
    const live = this.#live.get(runtimeId) ?? { vm: await QemuVm.adopt(dir) };
    if (live.vm !== null) await live.vm.kill();
    this.#live.delete(runtimeId);
    rmSync(dir, { recursive: true, force: true });
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

  async setMemoryTarget(runtimeId: string, mib: number): Promise<void> {
    await this.#vm(runtimeId).qmp.execute('balloon', { value: mib * MiB });
  }

  async checkpoint(): Promise<void> {
    throw new VesselError('unimplemented', 'checkpoints are not supported by this driver yet');
  }

  async deleteCheckpoint(checkpointId: string): Promise<void> {
    rmSync(join(this.opts.dataDir, 'checkpoints', checkpointId), { recursive: true, force: true });
  }

  async reattach(runtimeId: string): Promise<LiveState> {
    const dir = this.runtimeDir(runtimeId);
    const vm = await QemuVm.adopt(dir);
    if (vm === null) return 'gone';
    const spec = this.#readUid(vm.pid);
    this.#track(runtimeId, { vm, memoryMib: this.#memoryOf(vm.pid), uid: spec });
    return vm.status();
  }

  onUnexpectedExit(listener: (runtimeId: string) => void): void {
    this.#onExit = listener;
  }

  async close(): Promise<void> {
    for (const { vm } of this.#live.values()) vm.detach();
    this.#live.clear();
  }

  /** Capacity: the sum of the memory limits of live VMs must fit the host (times the overcommit). */
  #admit(spec: VmSpec): void {
    const budget = (totalmem() / MiB - HOST_RESERVE_MIB) * this.opts.memoryOvercommit;
    let used = 0;
    for (const v of this.#live.values()) used += v.memoryMib;
    const want = spec.resources.limits.memory_mib;
    if (used + want > budget) {
      throw unavailable(`not enough host memory: ${want} MiB requested, ${Math.max(0, Math.floor(budget - used))} MiB available`);
    }
  }

  async #boot(spec: VmSpec, undo: Teardown): Promise<void> {
    const dir = this.runtimeDir(spec.runtimeId);
    const paths = vmPaths(dir);
    for (const f of [paths.qmpSocket, paths.agentSocket, paths.pidFile, paths.serialLog]) rmSync(f, { force: true });
    const uid = this.#allocateUid(spec.runtimeId);
    const args = qemuArgs({
      accel: this.opts.accel,
      kernel: this.opts.image.kernel,
      initrd: this.opts.image.initrd,
      disk: paths.disk,
      qmpSocket: paths.qmpSocket,
      agentSocket: paths.agentSocket,
      serialLog: paths.serialLog,
      memoryMib: spec.resources.limits.memory_mib,
      vcpus: spec.resources.vcpus,
      hostname: spec.hostname,
      runAs: `${uid}:${uid}`,
      tscKhz: this.#tscKhz,
    });
    const vm = await this.#launchUntilAgent(dir, args, undo);
    if (spec.resources.requests.memory_mib < spec.resources.limits.memory_mib) {
      await vm.qmp.execute('balloon', { value: spec.resources.requests.memory_mib * MiB });
    }
    this.#track(spec.runtimeId, { vm, memoryMib: spec.resources.limits.memory_mib, uid });
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

  #vm(runtimeId: string): QemuVm {
    const live = this.#live.get(runtimeId);
    if (live === undefined || live.vm.exited) throw failedPrecondition('the runtime has no running VM');
    return live.vm;
  }

  /** One uid per VM, so a compromised QEMU cannot signal or ptrace another. */
  #allocateUid(runtimeId: string): number {
    const used = new Set([...this.#live.values()].map((v) => v.uid));
    let uid = UID_BASE + (parseInt(runtimeId.slice(0, 8), 16) % UID_RANGE);
    while (used.has(uid)) uid = UID_BASE + ((uid - UID_BASE + 1) % UID_RANGE);
    return uid;
  }

  #readUid(pid: number): number {
    const m = /^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m === null ? -1 : Number(m[1]);
  }

  #memoryOf(pid: number): number {
    const m = /-m\0(\d+)M/.exec(readFileSync(`/proc/${pid}/cmdline`, 'utf8'));
    return m === null ? 0 : Number(m[1]);
  }
}
