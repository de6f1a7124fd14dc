/**
 * An in-memory VmDriver for tests of the core and the HTTP facade only (validation, auth,
 * errors, state machine). It runs no VM; the real driver is tested with real VMs in test/vm.
 * Its "processes" write their command line to stdout: one that takes input (stdin or a
 * terminal) runs until its stdin is closed or a signal ends it; any other exits 0 at once.
 */
import { Readable } from 'node:stream';
import { VesselError, failedPrecondition, invalidArgument, notFound, unavailable } from '../../src/core/errors.js';
import type { CheckpointDescription, ConsoleLog, GuestAgent, RemoteCheckpoint, LiveState, VmDriver, VmSpec } from '../../src/core/ports.js';
import { consoleLogOf } from '../../src/core/console-log.js';
import type { AttachRequest, GuestFileInfo, GuestFileStat, ProcessOutput, ProcessSpec, ProcessState, ProcessStream } from '../../src/core/types.js';

const fakeInfo = (path: string, file: Buffer | undefined): GuestFileInfo => ({
  name: path.split('/').pop() || '/',
  path,
  type: file === undefined ? 'directory' : 'file',
  size_bytes: file?.length ?? 0,
  mode: file === undefined ? 0o755 : 0o644,
  modified_at: new Date(0).toISOString(),
});

/** A fake process: its output (its command line), and how it ends. */
interface EchoProcess {
  state: ProcessState;
  output: Buffer;
  /** Resolves once the process has ended. */
  ended: Promise<void>;
  end(status: 'exited' | 'signaled', code: number): void;
}

export class FakeDriver implements VmDriver {
  readonly vms = new Map<string, { state: LiveState; files: Map<string, Buffer>; dirs: Set<string>; memoryTarget: number }>();
  readonly checkpoints = new Set<string>();
  capacityMib = 64 * 1024;
  /** How long a create or start takes, so that tests can overlap them. */
  delayMs = 0;
  failNextCheckpoint = false;
  /** Checkpoints whose files the test has "damaged": verification reports them. */
  readonly damaged = new Set<string>();
  readonly verified: string[] = [];
  #exit: (id: string) => void = () => undefined;
  /** Each VM's serial console as the guest wrote it: a line per boot, or what a test puts there. */
  readonly consoleLogs = new Map<string, Buffer>();

  unavailableReason(): string | null {
    return null;
  }
  imageId(): string {
    return 'fakeimage';
  }
  hostLimits() {
    return { vcpus: 8, memoryMib: 32 * 1024 };
  }
  /**
   * Like the real layers: a runtime stands on the layer of each checkpoint taken of it, which
   * outlives the checkpoint's delete until the runtime goes.
   */
  readonly #layers = new Map<string, { bytes: number; standing: Set<string> }>();
  async orphanedLayerBytes(runtimeIds: string[]): Promise<number> {
    let bytes = 0;
    for (const [id, layer] of this.#layers) {
      if (!this.checkpoints.has(id) && runtimeIds.some((rt) => layer.standing.has(rt))) bytes += layer.bytes;
    }
    return bytes;
  }
  /** What each fake checkpoint "takes" on disk. */
  checkpointBytes = 64 * 1024 * 1024;
  async createTemplate(checkpointId: string) {
    this.checkpoints.add(checkpointId);
  }
  async sweep() {}
  /** Spares made for the warm pool and not claimed yet. */
  readonly spares = new Set<string>();

  async createSpare(spec: VmSpec): Promise<void> {
    await this.create(spec);
    this.spares.add(spec.runtimeId);
  }

  async create(spec: VmSpec): Promise<void> {
    await this.#delay();
    if (this.spares.delete(spec.runtimeId) && this.vms.has(spec.runtimeId)) return;
    if (this.#used() + spec.resources.limits.memory_mib > this.capacityMib) throw unavailable('not enough host memory');
    const state: LiveState = spec.paused === true && spec.fromCheckpointId !== null ? 'paused' : 'running';
    this.vms.set(spec.runtimeId, { state, files: new Map(), dirs: new Set(), memoryTarget: spec.resources.requests.memory_mib });
    this.#boot(spec.runtimeId);
  }
  async start(spec: VmSpec): Promise<void> {
    await this.#delay();
    const vm = this.vms.get(spec.runtimeId) ?? { state: 'running' as LiveState, files: new Map(), dirs: new Set<string>(), memoryTarget: 0 };
    vm.state = 'running';
    this.vms.set(spec.runtimeId, vm);
    this.#boot(spec.runtimeId);
  }
  #boot(id: string) {
    this.consoleLogs.set(id, Buffer.from(`Linux version 6.1.0-fake\nvessel-init: ${id} up\n`));
  }
  async readConsoleLog(id: string, maxBytes: number): Promise<ConsoleLog | null> {
    const log = this.consoleLogs.get(id);
    return log === undefined ? null : consoleLogOf(log.subarray(Math.max(0, log.length - maxBytes)), log.length > maxBytes);
  }
  async pause(id: string) {
    this.#vm(id).state = 'paused';
  }
  async resume(id: string) {
    this.#vm(id).state = 'running';
  }
  async suspend(id: string) {
    this.#vm(id).state = 'gone';
  }
  async stop(id: string) {
    this.#vm(id).state = 'gone';
  }
  async destroy(id: string) {
    this.vms.delete(id);
    this.consoleLogs.delete(id);
    this.spares.delete(id);
    for (const layer of this.#layers.values()) layer.standing.delete(id);
  }
  /**
   * The runtime's guest: the fake's own methods below, which take the runtime id, so that a test
   * can override or replace one of them (a subclass, or an assignment) for every guest at once.
   */
  guest(runtimeId: string): GuestAgent {
    return {
      spawnProcess: (spec) => this.spawnProcess(runtimeId, spec),
      attachProcess: (processId, request) => this.attachProcess(runtimeId, processId, request),
      listProcesses: () => this.listProcesses(runtimeId),
      signalProcess: (processId, signal, tree) => this.signalProcess(runtimeId, processId, signal, tree),
      resizeTerminal: (processId, rows, cols) => this.resizeTerminal(runtimeId, processId, rows, cols),
      forgetProcess: (processId) => this.forgetProcess(runtimeId, processId),
      readFile: (path) => this.readFile(runtimeId, path),
      writeFile: (path, body, maxBytes) => this.writeFile(runtimeId, path, body, maxBytes),
      listDir: (path) => this.listDir(runtimeId, path),
      statPath: (path, followSymlinks) => this.statPath(runtimeId, path, followSymlinks),
      makeDir: (path) => this.makeDir(runtimeId, path),
      removePath: (path, recursive) => this.removePath(runtimeId, path, recursive),
      readArchive: (dir) => this.readArchive(runtimeId, dir),
      writeArchive: (dir, body, maxBytes) => this.writeArchive(runtimeId, dir, body, maxBytes),
    };
  }

  readonly #processes = new Map<number, EchoProcess>();
  #nextProcessId = 1;

  /** Its command line is its output, without a newline: a buffered `echo hi` answers 'echo hi'. */
  async spawnProcess(runtimeId: string, spec: ProcessSpec): Promise<ProcessStream> {
    const vm = this.#vm(runtimeId);
    const dir = spec.cwd ?? '/';
    // As the real guest refuses it: a working directory that is not there cannot be entered.
    if (dir !== '/' && !vm.dirs.has(dir) && ![...vm.files.keys()].some((p) => p.startsWith(`${dir}/`))) {
      throw new VesselError('command_failed', `cannot start command: working directory '${dir}' does not exist`);
    }
    const line = [spec.command, ...spec.args].join(' ');
    const output = Buffer.from(line);
    const state: ProcessState = {
      id: this.#nextProcessId++,
      pid: 100,
      command: line.slice(0, 256),
      status: 'running',
      exitCode: null,
      signal: null,
      pty: spec.pty !== null,
      stdinOpen: spec.stdin || spec.pty !== null,
      startedAt: new Date(),
      endedAt: null,
      stdout: { start: 0, end: output.length },
      stderr: { start: 0, end: 0 },
    };
    let ended!: () => void;
    const proc: EchoProcess = {
      state,
      output,
      ended: new Promise((resolve) => (ended = resolve)),
      end: (status, code) => {
        if (state.status !== 'running') return;
        Object.assign(state, { status, stdinOpen: false, endedAt: new Date(), ...(status === 'exited' ? { exitCode: code } : { signal: code }) });
        ended();
        if (spec.forgetOnExit) this.#processes.delete(state.id);
      },
    };
    this.#processes.set(state.id, proc);
    const stream = this.#reader(proc, 0, true);
    if (!state.stdinOpen) proc.end('exited', 0);
    return stream;
  }
  async attachProcess(_runtimeId: string, processId: number, request: AttachRequest): Promise<ProcessStream> {
    const proc = this.#process(processId);
    const from = request.from === 'oldest' ? 0 : request.from === 'end' ? proc.output.length : Math.min(request.from.stdout, proc.output.length);
    return this.#reader(proc, from, request.follow);
  }
  async listProcesses(_runtimeId: string): Promise<ProcessState[]> {
    return [...this.#processes.values()].map((p) => ({ ...p.state }));
  }
  async signalProcess(_runtimeId: string, processId: number, signal: number, _tree: boolean): Promise<void> {
    this.#process(processId).end('signaled', signal);
  }
  async resizeTerminal(_runtimeId: string, _processId: number, _rows: number, _cols: number): Promise<void> {}
  async forgetProcess(_runtimeId: string, processId: number): Promise<void> {
    if (this.#process(processId).state.status === 'running') throw failedPrecondition(`process ${processId} is running`);
    this.#processes.delete(processId);
  }
  #process(processId: number): EchoProcess {
    const proc = this.#processes.get(processId);
    if (proc === undefined) throw notFound('process', String(processId));
    return proc;
  }
  /** Its output from `from`, then, when following, waits for its end (or a detach). */
  #reader(proc: EchoProcess, from: number, follow: boolean): ProcessStream {
    let detached!: () => void;
    const detach = new Promise<void>((resolve) => (detached = resolve));
    const chunks: ProcessOutput[] = from < proc.output.length ? [{ channel: 'stdout', offset: from, data: proc.output.subarray(from), lost: 0 }] : [];
    const finished = async (): Promise<ProcessState | null> => {
      if (!follow) return proc.state.status === 'running' ? null : { ...proc.state };
      const gone = await Promise.race([proc.ended.then(() => false), detach.then(() => true)]);
      return gone ? null : { ...proc.state };
    };
    const done = finished();
    return {
      state: { ...proc.state },
      done,
      start: { stdout: from, stderr: 0 },
      write: async () => {},
      endInput: () => proc.end('exited', 0),
      detach: () => detached(),
      async *[Symbol.asyncIterator]() {
        yield* chunks;
        await done;
      },
    };
  }
  async readFile(id: string, path: string): Promise<Readable> {
    const data = this.#vm(id).files.get(path);
    if (data === undefined) throw notFound('file', path);
    return Readable.from([data]);
  }
  async writeFile(id: string, path: string, body: Readable, _maxBytes: number): Promise<number> {
    const chunks: Buffer[] = [];
    for await (const c of body) chunks.push(c as Buffer);
    const data = Buffer.concat(chunks);
    this.#vm(id).files.set(path, data);
    return data.length;
  }
  /** Directories: those made with makeDir, and every one a file lies below. No archives. */
  async listDir(id: string, path: string): Promise<GuestFileInfo[]> {
    const vm = this.#vm(id);
    if (vm.files.has(path)) throw invalidArgument(`'${path}' is not a directory`);
    const prefix = path.endsWith('/') ? path : `${path}/`;
    const names = new Set([...vm.files.keys(), ...vm.dirs].filter((p) => p.startsWith(prefix)).map((p) => p.slice(prefix.length).split('/')[0]!));
    if (names.size === 0 && !vm.dirs.has(path)) throw notFound('directory', path);
    return [...names].sort().map((name) => fakeInfo(prefix + name, vm.files.get(prefix + name)));
  }
  async statPath(id: string, path: string, _followSymlinks: boolean): Promise<GuestFileStat> {
    const file = this.#vm(id).files.get(path);
    if (file === undefined) await this.listDir(id, path).catch(() => Promise.reject(notFound('path', path)));
    return { ...fakeInfo(path, file), uid: 0, gid: 0 };
  }
  async makeDir(id: string, path: string) {
    if (this.#vm(id).files.has(path)) throw invalidArgument(`'${path}' or one of its parents is not a directory`);
    this.#vm(id).dirs.add(path);
  }
  async removePath(id: string, path: string, recursive: boolean) {
    const vm = this.#vm(id);
    if (vm.files.delete(path)) return;
    if ((await this.listDir(id, path)).length > 0 && !recursive) throw failedPrecondition(`directory '${path}' is not empty`);
    const doomed = (p: string) => p === path || p.startsWith(`${path}/`);
    for (const p of [...vm.files.keys()].filter(doomed)) vm.files.delete(p);
    for (const p of [...vm.dirs].filter(doomed)) vm.dirs.delete(p);
  }
  async readArchive(_runtimeId: string, _dir: string): Promise<Readable> {
    throw new VesselError('unimplemented', 'the fake driver makes no archives');
  }
  async writeArchive(_runtimeId: string, _dir: string, _body: Readable, _maxBytes: number): Promise<number> {
    throw new VesselError('unimplemented', 'the fake driver extracts no archives');
  }
  async setMemoryTarget(id: string, mib: number) {
    this.#vm(id).memoryTarget = mib;
  }
  async checkpoint(id: string, checkpointId: string) {
    if (this.failNextCheckpoint) {
      this.failNextCheckpoint = false;
      throw new Error('injected checkpoint failure');
    }
    this.checkpoints.add(checkpointId);
    this.#layers.set(checkpointId, { bytes: this.checkpointBytes, standing: new Set([id]) });
    return { bytes: this.checkpointBytes };
  }
  async verifyCheckpoint(checkpointId: string): Promise<string | null> {
    this.verified.push(checkpointId);
    if (!this.checkpoints.has(checkpointId)) return 'its files are missing';
    return this.damaged.has(checkpointId) ? 'its ram file has changed since the checkpoint was made' : null;
  }
  async deleteCheckpoint(checkpointId: string) {
    this.checkpoints.delete(checkpointId);
  }
  async heldCheckpointIds(): Promise<string[]> {
    return [...this.checkpoints];
  }
  async describeCheckpoint(checkpointId: string): Promise<CheckpointDescription> {
    if (!this.checkpoints.has(checkpointId)) throw new Error('its files are missing');
    return { manifest: { checkpoint: checkpointId }, image: 'fake-image', files: ['state'] };
  }
  async readCheckpointFile(checkpointId: string, file: string): Promise<Readable> {
    if (!this.checkpoints.has(checkpointId)) throw new Error('its files are missing');
    return Readable.from([Buffer.from(`${checkpointId}/${file}`)]);
  }
  async captureDisk(runtimeId: string, checkpointId: string): Promise<void> {
    if (this.vms.get(runtimeId)?.state !== 'gone') throw failedPrecondition('the runtime has a VM: capture it with checkpoint()');
    this.checkpoints.add(checkpointId);
  }
  async adoptDisk(runtimeId: string, checkpointId: string): Promise<void> {
    if (!this.checkpoints.has(checkpointId)) throw new Error('its files are missing');
    this.vms.set(runtimeId, { state: 'gone', files: new Map(), dirs: new Set(), memoryTarget: 0 });
  }
  /** The shapes importCheckpoint was told to expect, per checkpoint. */
  readonly importedShapes = new Map<string, { memoryMib: number; vcpus: number }>();
  /** Takes the checkpoint when its source describes it as this fake's own would, having read its state file. */
  async importCheckpoint(checkpointId: string, source: RemoteCheckpoint, expected: { memoryMib: number; vcpus: number }): Promise<void> {
    if (source.description.image !== 'fake-image') throw new Error('another guest image');
    this.importedShapes.set(checkpointId, expected);
    for await (const piece of await source.open('state')) void piece;
    this.checkpoints.add(checkpointId);
  }
  async runtimeIds(): Promise<string[]> {
    return [...this.vms.keys()].filter((id) => !this.spares.has(id));
  }
  async reattach(id: string): Promise<LiveState> {
    return this.vms.get(id)?.state ?? 'gone';
  }
  onUnexpectedExit(listener: (id: string) => void) {
    this.#exit = listener;
  }
  /** Simulates a VM process dying on its own. */
  crash(id: string) {
    this.#vm(id).state = 'gone';
    this.#exit(id);
  }
  async close() {}
  async #delay(): Promise<void> {
    if (this.delayMs > 0) await new Promise((r) => setTimeout(r, this.delayMs));
  }
  #used(): number {
    return this.vms.size * 512;
  }
  #vm(id: string) {
    const vm = this.vms.get(id);
    if (vm === undefined) throw new Error(`no VM ${id}`);
    return vm;
  }
}
