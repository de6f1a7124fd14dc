/**
 * vessel-agent on the host, for tests: built with gcc (once per source hash, in the temp
 * directory), run as a child whose channel is one end of a socket pair, behind a Unix socket that
 * behaves like QEMU's chardev for the agent port: one client at a time, the guest side never told
 * when clients come and go, and whatever the agent writes while no client is connected dropped.
 * So a new client meets half-sent frames in both directions, as after a service restart.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, renameSync, writeFileSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AGENT_SOURCE_DIR, AGENT_SOURCE_FILES, agentGccArgs } from '../../src/vm/agent/build.js';

export type AgentBuild = { binary: string; warnings: string } | { skip: string };

/** The agent binary (test stubs for identity and power when asked), or why tests must skip. */
export function buildAgent(opts: { testStubs?: boolean } = {}): AgentBuild {
  if (spawnSync('gcc', ['--version']).error !== undefined) return { skip: 'gcc is not installed: vessel-agent cannot be built' };
  const h = createHash('sha256').update(agentGccArgs('OUT', { sourceDir: '.', testStubs: opts.testStubs }).join(' '));
  for (const f of AGENT_SOURCE_FILES) h.update(f).update(readFileSync(join(AGENT_SOURCE_DIR, f)));
  const binary = join(tmpdir(), `vessel-agent-${h.digest('hex').slice(0, 16)}`);
  if (!existsSync(binary)) {
    const partial = `${binary}.${process.pid}`;
    const r = spawnSync('gcc', agentGccArgs(partial, { testStubs: opts.testStubs }), { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`gcc failed:\n${r.stderr}`);
    writeFileSync(`${binary}.warnings`, r.stderr);
    renameSync(partial, binary);
  }
  return { binary, warnings: readFileSync(`${binary}.warnings`, 'utf8') };
}

export class RelayedAgent {
  readonly path: string;
  readonly child: ChildProcess;
  #log = '';
  readonly #server: Server;
  readonly #agent: Socket;
  #client: Socket | null = null;

  private constructor(child: ChildProcess, server: Server, path: string) {
    this.child = child;
    this.#server = server;
    this.path = path;
    this.#agent = child.stdio[3] as Socket;
    child.stderr!.on('data', (d: Buffer) => (this.#log = (this.#log + d.toString()).slice(-8000)));
    this.#agent.on('error', () => undefined);
    this.#agent.on('data', (d: Buffer) => {
      const c = this.#client;
      if (c === null) return; // no client: dropped, mid-frame or not
      if (!c.write(d)) {
        this.#agent.pause();
        c.once('drain', () => this.#agent.resume());
      }
    });
    server.on('connection', (c) => this.#accept(c));
  }

  /** Starts the agent with its channel on fd 3 and the relay listening at `dir`/agent.sock. */
  static async start(binary: string, dir: string, env: NodeJS.ProcessEnv = {}): Promise<RelayedAgent> {
    const child = spawn(binary, ['--channel-fd', '3'], { stdio: ['ignore', 'ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    const path = join(dir, `agent-${child.pid}.sock`);
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(path, resolve));
    return new RelayedAgent(child, server, path);
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** The agent's stderr, last 8000 characters. */
  get log(): string {
    return this.#log;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Writes raw bytes to the agent as a client would (hostile input tests). */
  writeRaw(bytes: Buffer): void {
    this.#agent.write(bytes);
  }

  /**
   * Bytes the host's client reads as if the agent had sent them, as a guest process that took a
   * copy of the agent's port writes them behind its back; dropped while no client is connected.
   */
  injectToClient(bytes: Buffer): void {
    this.#client?.write(bytes);
  }

  /** Drops the connected client, as a service that dies would. */
  dropClient(): void {
    this.#client?.destroy();
  }

  #accept(c: Socket): void {
    this.#client?.destroy();
    this.#client = c;
    c.on('error', () => undefined);
    c.on('data', (d: Buffer) => {
      if (!this.#agent.write(d)) {
        c.pause();
        this.#agent.once('drain', () => c.resume());
      }
    });
    c.on('close', () => {
      if (this.#client !== c) return;
      this.#client = null;
      this.#agent.resume();
    });
  }

  /** Kills the agent and every process group it started, and closes the relay. */
  async stop(): Promise<void> {
    for (const pid of childrenOf(this.pid)) {
      try {
        process.kill(-pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    this.child.kill('SIGKILL');
    this.#client?.destroy();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/** Fields of /proc/PID/stat after the command name. */
function statFields(pid: number): string[] {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
}

export function childrenOf(pid: number): number[] {
  const kids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (Number(statFields(Number(entry))[1]) === pid) kids.push(Number(entry));
    } catch {
      /* gone */
    }
  }
  return kids;
}

/** CPU time (user + system) in clock ticks. */
export function cpuTicks(pid: number): number {
  const f = statFields(pid);
  return Number(f[11]) + Number(f[12]);
}

/** Voluntary context switches: how often the process went to sleep, i.e. woke up. */
export function wakeups(pid: number): number {
  return Number(/voluntary_ctxt_switches:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);
}

/**
 * Memory that is the process's own: anonymous pages (heap, stack, static data, mmap'd buffers)
 * and swap. Pages of the binary are left out: they are the page cache's (and on a tmpfs /tmp a
 * freshly written binary's pages even count as dirty), not the agent's cost.
 */
export function privateBytes(pid: number): number {
  const rollup = readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
  const kib = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(rollup)?.[1] ?? 0);
  return (kib('Anonymous') + kib('Swap')) * 1024;
}

/** Pids whose command line is exactly `argv`. */
export function pidsRunning(argv: string[]): number[] {
  const want = argv.join('\0') + '\0';
  const found: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      if (readFileSync(`/proc/${entry}/cmdline`, 'latin1') === want) found.push(Number(entry));
    } catch {
      /* gone */
    }
  }
  return found;
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` until it returns a value that is not undefined, or fails after `ms`. */
export async function eventually<V>(check: () => V | undefined | Promise<V | undefined>, ms = 5000, what = 'condition'): Promise<V> {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(20);
  }
}
