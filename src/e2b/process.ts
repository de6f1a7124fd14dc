/**
 * envd's `process.Process` service over Vessel's processes. Start is a streamed exec run in the
 * background: the start event with the guest's pid, the output as it comes, keepalives at the
 * interval the SDK asks for, and the end with the exit code; the command is killed at its Connect
 * deadline while its caller reads it, and runs on when its caller goes (as envd's do). Connect reads a process's output from
 * now on; List, SendInput, CloseStdin, SendSignal and Update (a terminal's size) name processes
 * by their guest pid. docs/e2b.md says what differs from envd.
 */
import { Readable } from 'node:stream';
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { Core } from '../core/core.js';
import { exitCodeOf } from '../core/processes.js';
import type { ProcessOutput, ProcessState } from '../core/types.js';
import { connectErrorOf } from './answers.js';
import { Process, Signal, type PTY, type ProcessSelector, type StartRequest, type ProcessEventSchema } from './gen/process/process_pb.js';

/** Who calls, for one RPC: set by the envd routes (envd.ts) once the guard admitted the caller. */
export interface EnvdCaller {
  tenantId: string;
  runtimeId: string;
  /** The user the SDK names (`Authorization: Basic <user>:`, its `user` option); null: the runtime's default. */
  user: string | null;
}


/** A user name or id, with a group after a colon: what the exec API's `user` takes. */
const USER_SPEC = /^[A-Za-z0-9_.][A-Za-z0-9_.-]{0,255}\$?(:[A-Za-z0-9_.][A-Za-z0-9_.-]{0,255})?$/;

/** The header in which E2B's SDK asks for keepalives, in seconds. */
export const KEEPALIVE_HEADER = 'keepalive-ping-interval';
const MIN_KEEPALIVE_SECS = 1;
const MAX_KEEPALIVE_SECS = 300;
/** A command without a Connect deadline (the SDK's timeoutMs: 0) runs at most this long, E2B's longest sandbox life. */
const NO_DEADLINE_SECS = 24 * 3600;
/** What one SendInput may carry (its RPC body is bounded too, envd.ts). */
const MAX_INPUT_BYTES = 1024 * 1024;
/** A terminal's rows and columns are at most this many. */
const MAX_PTY_SIDE = 1000;

export function processService(core: Core, callerOf: (ctx: HandlerContext) => EnvdCaller): ServiceImpl<typeof Process> {
  const processes = core.processes;

  /** The guest's process that envd's selector names (envd names processes by their pid). */
  const processOf = async ({ tenantId, runtimeId }: EnvdCaller, selector: ProcessSelector | undefined): Promise<ProcessState> => {
    const chosen = selector?.selector;
    if (chosen === undefined || chosen.case === undefined) throw new ConnectError('process selector is required', Code.InvalidArgument);
    if (chosen.case === 'tag') throw new ConnectError('processes are named by pid here: tags are not served (docs/e2b.md)', Code.Unimplemented);
    // A pid may be reused while an exited process is still kept: the running one is meant.
    const named = (await processes.list(tenantId, runtimeId)).filter((p) => p.pid === chosen.value);
    const found = named.find((p) => p.status === 'running') ?? named.at(-1);
    if (found === undefined) throw new ConnectError(`process with pid ${chosen.value} not found`, Code.NotFound);
    return found;
  };
  /** An exited process is dropped as its end is delivered, as envd forgets it (another reader may have dropped it first). */
  const forget = ({ tenantId, runtimeId }: EnvdCaller, id: number) => processes.forget(tenantId, runtimeId, id).catch(() => undefined);
  const unary = async <T>(ctx: HandlerContext, work: (caller: EnvdCaller) => Promise<T>): Promise<T> => {
    try {
      return await work(callerOf(ctx));
    } catch (err) {
      throw connectErrorOf(err);
    }
  };
  const writeInput = (caller: EnvdCaller, id: number, data: Uint8Array, eof: boolean, signal: AbortSignal) =>
    processes.writeStdin(caller.tenantId, caller.runtimeId, id, Readable.from(data.length === 0 ? [] : [Buffer.from(data)]), eof, MAX_INPUT_BYTES, signal);

  return {
    async *start(req: StartRequest, ctx: HandlerContext): AsyncGenerator<Answer> {
      const caller = callerOf(ctx);
      const config = req.process;
      if (config === undefined || config.cmd === '') throw new ConnectError('process.cmd is required', Code.InvalidArgument);
      if (req.tag !== undefined) throw new ConnectError('processes are named by pid here: tags are not served (docs/e2b.md)', Code.Unimplemented);
      if (caller.user !== null && !USER_SPEC.test(caller.user)) throw new ConnectError('the Authorization header names no valid user', Code.InvalidArgument);
      const pty = req.pty === undefined ? null : ptySizeOf(req.pty);
      const remainingMs = ctx.timeoutMs();
      let session;
      try {
        // In the background: the command runs on when its caller goes, for commands.connect, as
        // envd's do; while its caller reads it, it is killed at its Connect deadline.
        session = await processes.execStream(caller.tenantId, caller.runtimeId, {
          command: config.cmd,
          args: config.args,
          cwd: config.cwd ?? null,
          env: config.envs,
          user: caller.user,
          stdin: null,
          openStdin: req.stdin === true,
          pty,
          maxOutputBytes: 0,
          timeoutSecs: remainingMs === undefined ? NO_DEADLINE_SECS : Math.max(1, Math.ceil(remainingMs / 1000)),
          background: true,
        });
      } catch (err) {
        throw connectErrorOf(err);
      }
      let ended = false;
      try {
        yield { event: { event: { case: 'start', value: { pid: session.process.pid } } } };
        yield* events(session.output, pty !== null, ctx);
        const { exit_code: exitCode } = await session.result();
        ended = true;
        await forget(caller, session.process.id);
        yield { event: endOf(exitCode) };
      } catch (err) {
        throw connectErrorOf(err);
      } finally {
        if (!ended) session.abandon();
      }
    },

    async *connect(req, ctx): AsyncGenerator<Answer> {
      const caller = callerOf(ctx);
      let attachment;
      try {
        const found = await processOf(caller, req.process);
        attachment = await processes.output(caller.tenantId, caller.runtimeId, found.id, 'end', true);
      } catch (err) {
        throw connectErrorOf(err);
      }
      try {
        const stream = attachment.stream;
        yield { event: { event: { case: 'start', value: { pid: stream.state.pid } } } };
        yield* events(stream, stream.state.pty, ctx);
        const final = await stream.done;
        if (final === null) throw new ConnectError('the process\'s output stream ended before it exited', Code.Unavailable);
        await forget(caller, final.id);
        yield { event: endOf(exitCodeOf(final)) };
      } catch (err) {
        throw connectErrorOf(err);
      } finally {
        attachment.close();
      }
    },

    list: (_req, ctx) =>
      unary(ctx, async ({ tenantId, runtimeId }) => ({
        processes: (await processes.list(tenantId, runtimeId))
          .filter((p) => p.status === 'running')
          .map((p) => ({ pid: p.pid, config: { cmd: p.command, args: [], envs: {} } })),
      })),

    sendInput: (req, ctx) =>
      unary(ctx, async (caller) => {
        const input = req.input?.input;
        if (input === undefined || input.case === undefined) throw new ConnectError('input is required', Code.InvalidArgument);
        const found = await processOf(caller, req.process);
        await writeInput(caller, found.id, input.value, false, ctx.signal);
        return {};
      }),

    closeStdin: (req, ctx) =>
      unary(ctx, async (caller) => {
        const found = await processOf(caller, req.process);
        await writeInput(caller, found.id, new Uint8Array(0), true, ctx.signal);
        return {};
      }),

    sendSignal: (req, ctx) =>
      unary(ctx, async (caller) => {
        const name = SIGNALS[req.signal];
        if (name === undefined) throw new ConnectError('signal must be SIGTERM or SIGKILL', Code.InvalidArgument);
        const found = await processOf(caller, req.process);
        await processes.signal(caller.tenantId, caller.runtimeId, found.id, name, true);
        return {};
      }),

    update: (req, ctx) =>
      unary(ctx, async (caller) => {
        const found = await processOf(caller, req.process);
        if (req.pty === undefined) return {};
        if (!found.pty) throw new ConnectError(`process ${found.pid} has no terminal`, Code.FailedPrecondition);
        const { rows, cols } = ptySizeOf(req.pty);
        await processes.resize(caller.runtimeId, found.id, rows, cols);
        return {};
      }),
  };
}

/** One of envd's process events; Start and Connect answer each as `{ event }`. */
type ProcessEventInit = MessageInitShape<typeof ProcessEventSchema>;
type Answer = { event: ProcessEventInit };

const SIGNALS: Partial<Record<Signal, 'SIGTERM' | 'SIGKILL'>> = { [Signal.SIGTERM]: 'SIGTERM', [Signal.SIGKILL]: 'SIGKILL' };

function endOf(exitCode: number): ProcessEventInit {
  return { event: { case: 'end', value: { exitCode, exited: true, status: `exit status ${exitCode}` } } };
}

/** A process's output as envd's events (a terminal's all on `pty`), with keepalives as the caller asked. */
async function* events(output: AsyncIterable<ProcessOutput>, pty: boolean, ctx: HandlerContext): AsyncGenerator<Answer> {
  for await (const item of withKeepalives(output, keepaliveMs(ctx.requestHeader.get(KEEPALIVE_HEADER)), ctx.signal)) {
    if (item === KEEPALIVE) yield { event: { event: { case: 'keepalive', value: {} } } };
    else yield { event: { event: { case: 'data', value: { output: { case: pty ? 'pty' : item.channel, value: item.data } } } } };
  }
}

/** A terminal's size, bounded as Vessel's terminals are. */
function ptySizeOf(pty: PTY): { rows: number; cols: number } {
  const rows = pty.size?.rows ?? 0;
  const cols = pty.size?.cols ?? 0;
  if (rows < 1 || rows > MAX_PTY_SIDE || cols < 1 || cols > MAX_PTY_SIDE) throw new ConnectError(`a terminal has 1 to ${MAX_PTY_SIDE} rows and columns`, Code.InvalidArgument);
  return { rows, cols };
}

/** The keepalive interval the caller asked for, bounded; null: none asked. */
function keepaliveMs(header: string | null): number | null {
  if (header === null) return null;
  const secs = Number(header);
  if (!Number.isFinite(secs) || secs <= 0) return null;
  return Math.min(MAX_KEEPALIVE_SECS, Math.max(MIN_KEEPALIVE_SECS, secs)) * 1000;
}

const KEEPALIVE = Symbol('keepalive');

/**
 * The output, with a keepalive whenever `intervalMs` passed without one: the pending read is kept
 * across keepalives, so no chunk is lost or reordered.
 */
async function* withKeepalives(output: AsyncIterable<ProcessOutput>, intervalMs: number | null, signal: AbortSignal): AsyncGenerator<ProcessOutput | typeof KEEPALIVE> {
  const it = output[Symbol.asyncIterator]();
  let pending: Promise<IteratorResult<ProcessOutput>> | null = null;
  try {
    for (;;) {
      pending ??= it.next();
      let timer: NodeJS.Timeout | undefined;
      const tick = intervalMs === null ? null : new Promise<typeof KEEPALIVE>((resolve) => (timer = setTimeout(resolve, intervalMs, KEEPALIVE)));
      const next = await (tick === null ? pending : Promise.race([pending, tick])).finally(() => clearTimeout(timer));
      if (next === KEEPALIVE) {
        if (signal.aborted) return;
        yield KEEPALIVE;
        continue;
      }
      pending = null;
      if (next.done === true) return;
      yield next.value;
    }
  } finally {
    if (pending === null) await it.return?.();
    else void it.return?.();
  }
}
