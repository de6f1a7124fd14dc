/**
 * Processes in a runtime: a command run buffered or streamed as it runs (commands.ts), background
 * processes the guest keeps (with their output rings, stdin and signals), and terminals. The
 * guest agent holds every process and its output, so they outlive API requests and service
 * restarts; this service only checks who may reach them and keeps the runtime from idling while
 * someone is attached.
 */
import { constants as osConstants } from 'node:os';
import type { Readable } from 'node:stream';
import { collectCommand, startCommand, type ExecSession, type StreamOptions } from './commands.js';
import { VesselError, failedPrecondition, invalidArgument, notFound } from './errors.js';
import { requireState } from './lifecycle.js';
import type { GuestAgents } from './ports.js';
import type { RuntimeService } from './runtimes.js';
import type { AttachRequest, ExecRequest, ExecResult, ProcessSpec, ProcessState, ProcessStream, Runtime } from './types.js';

export { DEFAULT_RING_BYTES, exitCodeOf, type ExecSession, type StreamOptions } from './commands.js';

export const MIN_RING_BYTES = 4 * 1024;
export const MAX_RING_BYTES = 4 * 1024 * 1024;
/** What a terminal's output ring keeps for a reader that attaches later: a few screens. */
const TERMINAL_RING_BYTES = 256 * 1024;
/** How long a closed terminal's tree has after SIGHUP before it is killed. */
const HANGUP_GRACE_MS = 2000;

/** The signals the API takes by name: what a user sends to a process they run, nothing exotic. */
export const SIGNAL_NAMES = ['SIGHUP', 'SIGINT', 'SIGQUIT', 'SIGKILL', 'SIGUSR1', 'SIGUSR2', 'SIGTERM', 'SIGCONT', 'SIGSTOP', 'SIGTSTP', 'SIGWINCH'] as const;
export type SignalName = (typeof SIGNAL_NAMES)[number];
/** What a terminal runs when the caller names nothing: a login shell, as ssh gives. */
const TERMINAL_SHELL = { command: '/bin/bash', args: ['-l'] };

/** A background process: never held back by a reader, kept after it exits. */
export type ProcessStartInput = Omit<ProcessSpec, 'hold' | 'forgetOnExit'>;

/** A reader attached to a process (output, stdin, or a terminal). */
export interface Attachment {
  readonly runtimeId: string;
  readonly stream: ProcessStream;
  /** Ends the attachment: a terminal this attachment started is hung up; anything else runs on. */
  close(): void;
}

/** What a runtime's commands get unless the request says otherwise: its template's ENV, WORKDIR and USER. */
export interface CommandDefaults {
  env: Record<string, string>;
  cwd: string | null;
  user: string | null;
}
export const NO_COMMAND_DEFAULTS: CommandDefaults = { env: {}, cwd: null, user: null };

export class ProcessService {
  constructor(
    private readonly runtimes: RuntimeService,
    private readonly guests: GuestAgents,
    /** A runtime's defaults, from the template it was created from. */
    private readonly defaultsOf: (rt: Runtime) => Promise<CommandDefaults> = async () => NO_COMMAND_DEFAULTS,
  ) {}

  /**
   * The request's env laid over the runtime's (from its create), laid over the template's, as
   * `docker exec` does; its cwd, or the template's WORKDIR; its user, or the template's USER.
   */
  async #withDefaults<R extends { env: Record<string, string>; cwd: string | null; user?: string | null }>(rt: Runtime, req: R): Promise<R> {
    const d = rt.templateId === null ? NO_COMMAND_DEFAULTS : await this.defaultsOf(rt);
    return { ...req, env: { ...d.env, ...rt.env, ...req.env }, cwd: req.cwd ?? d.cwd, user: req.user ?? d.user };
  }

  /**
   * Starts a command whose output the caller reads as it comes. The command waits for its reader
   * (no byte is dropped before it is delivered), and is killed at its timeout or when the reader
   * goes, unless `background`: then it runs on as a background process, output going to its ring.
   */
  async execStream(tenantId: string, ref: string, req: ExecRequest & StreamOptions): Promise<ExecSession> {
    const rt = await this.#runningRuntime(tenantId, ref);
    return startCommand(this.guests.guest(rt.id), await this.#withDefaults(rt, req), this.runtimes.hold(rt.id));
  }

  /** A buffered exec: the streamed exec, collected up to the request's cap per channel. */
  async exec(tenantId: string, ref: string, req: ExecRequest): Promise<ExecResult> {
    return collectCommand(await this.execStream(tenantId, ref, { ...req, background: false }), req.maxOutputBytes);
  }

  /** Starts a background process and answers once it runs; its output goes to its rings. */
  async start(tenantId: string, ref: string, input: ProcessStartInput): Promise<ProcessState> {
    const rt = await this.#runningRuntime(tenantId, ref);
    const runtimeId = rt.id;
    checkRing(input.ringBytes);
    const spec = await this.#withDefaults(rt, input);
    return this.runtimes.busy(runtimeId, async () => {
      const stream = await this.guests.guest(runtimeId).spawnProcess({ ...spec, hold: false, forgetOnExit: false });
      stream.detach();
      return stream.state;
    });
  }

  async list(tenantId: string, ref: string): Promise<ProcessState[]> {
    const runtimeId = await this.#running(tenantId, ref);
    return this.guests.guest(runtimeId).listProcesses();
  }

  async get(tenantId: string, ref: string, processId: number): Promise<ProcessState> {
    const runtimeId = await this.#running(tenantId, ref);
    return this.#find(runtimeId, processId);
  }

  /** A reader of a process's output from `from`; with `follow`, until it exits. */
  async output(tenantId: string, ref: string, processId: number, from: AttachRequest['from'], follow: boolean): Promise<Attachment> {
    const runtimeId = await this.#running(tenantId, ref);
    return this.#attach(runtimeId, processId, { from, follow, input: false }, null);
  }

  /**
   * Writes to a process's stdin; `eof` closes it afterwards. Resolves once the guest took every
   * byte; `abort` (the client went away) stops waiting for a process that does not read.
   */
  async writeStdin(tenantId: string, ref: string, processId: number, body: Readable, eof: boolean, maxBytes: number, abort: AbortSignal): Promise<number> {
    const runtimeId = await this.#running(tenantId, ref);
    const known = await this.#find(runtimeId, processId);
    if (known.status !== 'running') throw failedPrecondition(`process ${processId} has exited`);
    if (!known.stdinOpen) throw failedPrecondition(`process ${processId} has no open stdin; start it with "stdin": true`);
    return this.runtimes.busy(runtimeId, async () => {
      // FOLLOW keeps the stream (and with it the ownership of stdin) open until we detach.
      const stream = await this.guests.guest(runtimeId).attachProcess(processId, { from: 'end', follow: true, input: true });
      // Its output is not ours to read, but unread it would stall the stream at its window.
      void (async () => {
        for await (const _ of stream);
      })().catch(() => undefined);
      const detach = () => stream.detach();
      if (abort.aborted) detach();
      abort.addEventListener('abort', detach);
      let written = 0;
      try {
        for await (const chunk of body) {
          const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as Uint8Array);
          written += buf.length;
          if (written > maxBytes) throw new VesselError('invalid_argument', `stdin writes are at most ${maxBytes} bytes per request`, { httpStatus: 413 });
          await stream.write(buf);
        }
        if (eof) stream.endInput();
        return written;
      } finally {
        abort.removeEventListener('abort', detach);
        stream.detach();
      }
    });
  }

  async signal(tenantId: string, ref: string, processId: number, signal: SignalName, tree: boolean): Promise<void> {
    const runtimeId = await this.#running(tenantId, ref);
    await this.runtimes.busy(runtimeId, () => this.guests.guest(runtimeId).signalProcess(processId, osConstants.signals[signal], tree));
  }

  /** Drops an exited process and its retained output. */
  async forget(tenantId: string, ref: string, processId: number): Promise<void> {
    const runtimeId = await this.#running(tenantId, ref);
    await this.runtimes.busy(runtimeId, () => this.guests.guest(runtimeId).forgetProcess(processId));
  }

  /**
   * A terminal: a new login shell (or `command`) on a PTY of this size, hung up when the
   * attachment closes; or, with `processId`, an existing PTY process, replaying what its ring
   * holds, which runs on when the attachment closes.
   */
  async terminal(tenantId: string, ref: string, opts: { processId: number | null; size: { rows: number; cols: number }; command: { command: string; args: string[] } | null; user?: string | null }): Promise<Attachment> {
    const rt = await this.#runningRuntime(tenantId, ref);
    const runtimeId = rt.id;
    if (opts.processId !== null) {
      const known = await this.#find(runtimeId, opts.processId);
      if (!known.pty) throw failedPrecondition(`process ${opts.processId} has no terminal; start it with "pty"`);
      const attachment = await this.#attach(runtimeId, opts.processId, { from: 'oldest', follow: true, input: true }, null);
      if (known.status === 'running') await this.guests.guest(runtimeId).resizeTerminal(opts.processId, opts.size.rows, opts.size.cols).catch(() => undefined);
      return attachment;
    }
    const { env, cwd, user } = await this.#withDefaults(rt, { env: { TERM: 'xterm-256color', COLORTERM: 'truecolor' }, cwd: null, user: opts.user ?? null });
    const release = this.runtimes.hold(runtimeId);
    let stream: ProcessStream;
    try {
      stream = await this.guests.guest(runtimeId).spawnProcess({
        ...(opts.command ?? TERMINAL_SHELL),
        cwd,
        env,
        user,
        pty: opts.size,
        stdin: true,
        ringBytes: TERMINAL_RING_BYTES,
        hold: true,
        forgetOnExit: true,
      });
    } finally {
      release();
    }
    return this.#attached(runtimeId, stream, () => this.#hangUp(runtimeId, stream.state.id));
  }

  async resize(runtimeId: string, processId: number, rows: number, cols: number): Promise<void> {
    await this.guests.guest(runtimeId).resizeTerminal(processId, rows, cols);
  }

  /** Like a terminal closing: SIGHUP to the tree, then SIGKILL for whatever still runs. */
  #hangUp(runtimeId: string, processId: number): void {
    const signal = (sig: number) => this.guests.guest(runtimeId).signalProcess(processId, sig, true);
    void signal(osConstants.signals.SIGHUP)
      .then(() => new Promise((resolve) => setTimeout(resolve, HANGUP_GRACE_MS).unref()))
      .then(() => this.guests.guest(runtimeId).listProcesses())
      .then((all) => (all.find((p) => p.id === processId)?.status === 'running' ? signal(osConstants.signals.SIGKILL) : undefined))
      .catch(() => undefined); // the runtime stopped or the process is gone: nothing left to end
  }

  async #attach(runtimeId: string, processId: number, request: AttachRequest, onClose: (() => void) | null): Promise<Attachment> {
    const stream = await this.guests.guest(runtimeId).attachProcess(processId, request);
    return this.#attached(runtimeId, stream, onClose);
  }

  /** The runtime is busy for as long as someone is attached. */
  #attached(runtimeId: string, stream: ProcessStream, onClose: (() => void) | null): Attachment {
    const release = this.runtimes.hold(runtimeId);
    let open = true;
    return {
      runtimeId,
      stream,
      close: () => {
        if (!open) return;
        open = false;
        release();
        onClose?.();
        stream.detach();
      },
    };
  }

  async #find(runtimeId: string, processId: number): Promise<ProcessState> {
    const found = (await this.guests.guest(runtimeId).listProcesses()).find((p) => p.id === processId);
    if (found === undefined) throw notFound('process', String(processId));
    return found;
  }

  /** Processes live in the guest: only a running runtime has them to show. */
  async #running(tenantId: string, ref: string): Promise<string> {
    return (await this.#runningRuntime(tenantId, ref)).id;
  }

  async #runningRuntime(tenantId: string, ref: string): Promise<Runtime> {
    const rt = await this.runtimes.get(tenantId, ref);
    requireState('exec', rt.status, rt.displayName);
    return rt;
  }
}

function checkRing(bytes: number): void {
  if (!Number.isInteger(bytes) || bytes < MIN_RING_BYTES || bytes > MAX_RING_BYTES) {
    throw invalidArgument(`ring_bytes must be ${MIN_RING_BYTES} to ${MAX_RING_BYTES}`);
  }
}
