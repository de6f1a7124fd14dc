/**
 * A part of the service that runs as a process of its own (docs/security.md, "Processes"): started
 * by the service, linked to it by a PartLink on descriptor 3, given its settings in its first call
 * (`start`), and started again whenever it dies. The part drops to its own unprivileged user
 * itself, once its code is loaded (part-process.ts), so it can run from a checkout only root can read.
 *
 * What the part held dies with it; `onStart` gives a new one everything it must know again (the
 * gateway: every attached runtime), before anything else is sent to it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync } from 'node:fs';
import type { Socket } from 'node:net';
import { PartLink } from './part-link.js';

export interface ChildPartOptions {
  /** For logs: "gateway". */
  name: string;
  /** The compiled module the process runs (its main calls runPart of part-process.ts). */
  entry: string;
  /** The V8 heap the part may use: past it, it dies and is started again, the service does not. */
  maxHeapMib: number;
  /** What the part's `start` handler gets. */
  settings: () => unknown;
  /** The service's side of the link: what the part may call. */
  handlers: (link: PartLink) => void;
  /**
   * Descriptors each new process gets as its 4, 5, …, made afresh for it (the agent's: its end
   * of the pair that carries the VMs' agent connections). The service's copies are closed once
   * the process has them.
   */
  descriptors?: () => number[];
  /** How long the part's `start` may take (default START_TIMEOUT_MS): the API's reconciles every VM first. */
  startTimeoutMs?: number;
  /** Runs on each new process once it has started, before `ready()` resolves or calls go to it. */
  onStart: (link: PartLink, pid: number) => Promise<void>;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
}

/** How long a part has to load its code, drop its privileges and listen. */
const START_TIMEOUT_MS = 60_000;
const FIRST_RESTART_DELAY_MS = 100;
const MAX_RESTART_DELAY_MS = 5_000;
/** A part that ran this long without dying starts again at once when it does. */
const HEALTHY_AFTER_MS = 30_000;
const STOP_GRACE_MS = 5_000;

export class ChildPart {
  #child: ChildProcess | null = null;
  #link: PartLink | null = null;
  /** The current process's start, shared by everyone who waits for it. */
  #started: Promise<PartLink> | null = null;
  #closing = false;
  #restartDelayMs = FIRST_RESTART_DELAY_MS;
  #starts = 0;
  /** A part whose first start failed is not started again: the service's start fails instead. */
  #hasRun = false;

  constructor(private readonly opts: ChildPartOptions) {}

  /** Starts the part and resolves once it is ready; throws when its first start fails. */
  async start(): Promise<void> {
    await this.#spawn();
  }

  /** The pid of the part's current process, or null while it is being started again. */
  get pid(): number | null {
    return this.#link === null ? null : (this.#child?.pid ?? null);
  }

  /** How many processes of this part were started: 1 until the first one dies. */
  get starts(): number {
    return this.#starts;
  }

  /** The running part's link, waiting for a start under way; null when none is running or starting. */
  async ready(): Promise<PartLink | null> {
    if (this.#link !== null) return this.#link;
    return this.#started === null ? null : this.#started.catch(() => null);
  }

  /** The link when the part runs now, else null (calls that can wait for a restart use ready()). */
  get link(): PartLink | null {
    return this.#link;
  }

  async close(): Promise<void> {
    this.#closing = true;
    const child = this.#child;
    this.#link?.close('the service is stopping');
    if (child === null || child.exitCode !== null || child.signalCode !== null) return;
    await new Promise<void>((resolve) => {
      const kill = setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
      child.once('exit', () => {
        clearTimeout(kill);
        resolve();
      });
      child.kill('SIGTERM');
    });
  }

  #spawn(): Promise<PartLink> {
    this.#starts++;
    const extra = this.opts.descriptors?.() ?? [];
    let child: ChildProcess;
    try {
      child = spawn(process.execPath, [`--max-old-space-size=${this.opts.maxHeapMib}`, this.opts.entry], {
        stdio: ['ignore', 'inherit', 'inherit', 'pipe', ...extra],
        env: { ...process.env, VESSEL_PART: this.opts.name },
      });
    } finally {
      for (const fd of extra) closeSync(fd);
    }
    this.#child = child;
    const startedAt = Date.now();
    const link = new PartLink(child.stdio[3] as Socket);
    this.opts.handlers(link);
    child.once('exit', (code, signal) => {
      link.close(`the ${this.opts.name} process exited (${signal ?? `status ${code}`})`);
      if (this.#child === child) {
        this.#child = null;
        this.#link = null;
      }
      if (this.#closing || !this.#hasRun) return;
      this.opts.log.error({ part: this.opts.name, pid: child.pid, code, signal }, `the ${this.opts.name} process died; it is started again`);
      this.#restartDelayMs = Date.now() - startedAt > HEALTHY_AFTER_MS ? FIRST_RESTART_DELAY_MS : Math.min(this.#restartDelayMs * 2, MAX_RESTART_DELAY_MS);
      setTimeout(() => {
        if (!this.#closing) void this.#spawn().catch((err: Error) => this.opts.log.error({ part: this.opts.name, err: err.message }, `the ${this.opts.name} process did not start`));
      }, this.#restartDelayMs).unref();
    });
    const started = (async () => {
      const timeout = setTimeout(() => child.kill('SIGKILL'), this.opts.startTimeoutMs ?? START_TIMEOUT_MS);
      try {
        await link.call('start', this.opts.settings());
        await this.opts.onStart(link, child.pid!);
      } catch (err) {
        child.kill('SIGKILL');
        throw new Error(`the ${this.opts.name} process did not start: ${(err as Error).message}`);
      } finally {
        clearTimeout(timeout);
      }
      this.#hasRun = true;
      if (this.#child === child) this.#link = link;
      this.opts.log.info({ part: this.opts.name, pid: child.pid }, `the ${this.opts.name} process runs`);
      return link;
    })();
    this.#started = started;
    return started;
  }
}
