/**
 * One QEMU process and its two control channels (QMP for the machine, vessel-agent for the OS
 * inside, whose frames the agent's process parses: agent-part.ts). The process is detached, so it
 * outlives the service; after a restart adopt() finds it again through the pid file and the
 * sockets in its directory. It starts in a network namespace of its own (`unshare --net`): its
 * NIC is a TAP descriptor it inherits, and it can open no socket on the host's networks.
 */
import { spawn } from 'node:child_process';
import { closeSync, existsSync, openSync, readFileSync } from 'node:fs';
import { writeFileDurably } from '../platform/durable-files.js';
import { basename, join } from 'node:path';
import type { AgentPart, RuntimeAgent } from './agent-part.js';
import { readLogEnd } from './log-rotation.js';
import { QmpClient } from './qmp-client.js';

export const vmPaths = (dir: string) => ({
  ram: join(dir, 'ram'),
  qmpSocket: join(dir, 'qmp.sock'),
  agentSocket: join(dir, 'vessel-agent.sock'),
  serialLog: join(dir, 'serial.log'),
  qemuLog: join(dir, 'qemu.log'),
  pidFile: join(dir, 'qemu.pid'),
});

/** How long one connection waits for its HELLO_ACK during boot before another is tried. */
const HANDSHAKE_ATTEMPT_MS = 10_000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Guards against pid reuse: the process must be a QEMU started for this directory. */
function isOurQemu(pid: number, dir: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(vmPaths(dir).qmpSocket);
  } catch {
    return false;
  }
}

/** The end of a log, for an error message. */
const tail = (file: string, bytes = 1500): string => readLogEnd(file, bytes)?.toString('utf8').trim() ?? '';

export class QemuVm {
  readonly paths: ReturnType<typeof vmPaths>;
  #qmp: QmpClient;
  readonly #agent: RuntimeAgent;
  #expectingExit = false;
  #exited = false;
  readonly #exitListeners: Array<(expected: boolean) => void> = [];

  private constructor(
    readonly dir: string,
    readonly pid: number,
    qmp: QmpClient,
    agents: AgentPart,
  ) {
    this.paths = vmPaths(dir);
    this.#qmp = qmp;
    // A runtime's directory is named by its id.
    this.#agent = agents.runtime(basename(dir), this.paths.agentSocket, () => this.#exited);
    qmp.onClose(() => void this.#watchExit());
  }

  /**
   * `inherited[i]` becomes QEMU's descriptor 3 + i. `onSpawn` gets the pid at once, before QEMU
   * has done anything (the driver moves it into the VM's cgroup there).
   */
  static async launch(agents: AgentPart, dir: string, args: string[], inherited: number[] = [], onSpawn: (pid: number) => void = () => undefined): Promise<QemuVm> {
    const paths = vmPaths(dir);
    const log = openSync(paths.qemuLog, 'a');
    let child;
    try {
      child = spawn('unshare', ['--net', '--', 'qemu-system-x86_64', ...args], { detached: true, stdio: ['ignore', log, log, ...inherited] });
    } finally {
      closeSync(log);
    }
    let exited = false;
    child.on('exit', () => (exited = true));
    child.on('error', () => (exited = true));
    child.unref();
    const pid = child.pid;
    if (pid === undefined) throw new Error('could not start qemu-system-x86_64');
    try {
      onSpawn(pid);
    } catch (err) {
      process.kill(pid, 'SIGKILL');
      throw err;
    }
    writeFileDurably(paths.pidFile, String(pid));
    const started = Date.now();
    for (;;) {
      if (exited) throw new Error(`QEMU exited at start: ${tail(paths.qemuLog) || 'no output'}`);
      if (existsSync(paths.qmpSocket)) {
        try {
          return new QemuVm(dir, pid, await QmpClient.connect(paths.qmpSocket, 5000), agents);
        } catch {
          // the socket file can appear a moment before QEMU accepts on it
        }
      }
      if (Date.now() - started > 10_000) {
        process.kill(pid, 'SIGKILL');
        throw new Error('QEMU did not open its QMP socket within 10 s');
      }
      await sleep(15);
    }
  }

  /** Reattaches to a VM left running by an earlier service process, or returns null. */
  /** The pid of a QEMU of this runtime directory that is still alive, answering or not; null when there is none. */
  static processOf(dir: string): number | null {
    const paths = vmPaths(dir);
    if (!existsSync(paths.pidFile)) return null;
    const pid = Number(readFileSync(paths.pidFile, 'utf8'));
    return Number.isInteger(pid) && isAlive(pid) && isOurQemu(pid, dir) ? pid : null;
  }

  static async adopt(agents: AgentPart, dir: string): Promise<QemuVm | null> {
    const pid = QemuVm.processOf(dir);
    if (pid === null) return null;
    const paths = vmPaths(dir);
    try {
      return new QemuVm(dir, pid, await QmpClient.connect(paths.qmpSocket, 3000), agents);
    } catch {
      return null;
    }
  }

  /** The VM's agent, not yet connected: calls connect as they need (RemoteGuestAgent). */
  get agentHandle(): RuntimeAgent {
    return this.#agent;
  }

  get qmp(): QmpClient {
    return this.#qmp;
  }

  get exited(): boolean {
    return this.#exited;
  }

  /** `expected` is false when the process died without being asked to. */
  onExit(listener: (expected: boolean) => void): void {
    this.#exitListeners.push(listener);
  }

  /**
   * The VM's vessel-agent, through the agent's process, which is handed a new connection after
   * any failure. Every connection starts with the resync handshake (HELLO): whatever an earlier
   * connection, a checkpoint's twin or a hostile guest left on the channel is skipped, and no
   * stream survives it. Resolves once the agent has answered on the current connection.
   */
  async agent(timeoutMs = 5000): Promise<RuntimeAgent> {
    await this.#agent.connect(timeoutMs);
    return this.#agent;
  }

  /**
   * Waits until the agent answers a HELLO: the guest has booted. One connection waits as long as
   * it may (QEMU holds the handshake until the agent opens its port); a refused or failed one is
   * tried again.
   */
  async waitForAgent(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (this.#exited) throw new Error(`the VM exited during boot: ${tail(this.paths.serialLog, 600) || tail(this.paths.qemuLog)}`);
      try {
        await this.agent(Math.min(HANDSHAKE_ATTEMPT_MS, Math.max(100, deadline - Date.now())));
        return;
      } catch (err) {
        if (Date.now() > deadline) throw new Error(`the guest agent did not answer within ${timeoutMs} ms`, { cause: err });
        await sleep(50);
      }
    }
  }

  async status(): Promise<'running' | 'paused'> {
    const s = await this.#qmp.execute<{ status: string; running: boolean }>('query-status');
    return s.running ? 'running' : 'paused';
  }

  /** Asks the guest to power off, and kills QEMU if it has not exited by the deadline. */
  async shutdown(deadlineMs: number): Promise<void> {
    this.#expectingExit = true;
    try {
      if ((await this.status()) === 'paused') await this.#qmp.execute('cont');
      const agent = await this.agent(Math.min(2000, deadlineMs));
      // The agent answers, then stops every process, syncs, and powers the guest off.
      await agent.call('shutdown', { timeoutMs: Math.min(2000, deadlineMs) });
    } catch {
      // an unresponsive guest gets the hard stop below
    }
    await this.#awaitExit(deadlineMs);
    if (!this.#exited) await this.kill();
  }

  async kill(): Promise<void> {
    this.#expectingExit = true;
    if (isAlive(this.pid) && isOurQemu(this.pid, this.dir)) process.kill(this.pid, 'SIGKILL');
    await this.#awaitExit(5000);
    this.#qmp.close();
    this.#agent.drop();
  }

  /** Stops watching without touching the VM (service shutdown). */
  detach(): void {
    this.#expectingExit = true;
    this.#qmp.close();
    this.#agent.drop();
  }

  async #awaitExit(ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    while (isAlive(this.pid) && Date.now() < deadline) await sleep(20);
    if (!isAlive(this.pid)) this.#markExited();
  }

  /** QMP closed: either QEMU is exiting or someone else closed the socket. */
  async #watchExit(): Promise<void> {
    const deadline = Date.now() + 3000;
    while (isAlive(this.pid) && Date.now() < deadline) await sleep(25);
    if (!isAlive(this.pid)) this.#markExited();
  }

  #markExited(): void {
    if (this.#exited) return;
    this.#exited = true;
    this.#agent.drop();
    for (const l of this.#exitListeners.splice(0)) l(this.#expectingExit);
  }
}
