/**
 * envd's `process.Process/Start` over Vessel's streamed exec: the start event with the guest's
 * pid, the output as it comes, keepalives at the interval the SDK asks for, and the end with the
 * exit code. The command is killed when the caller goes or its Connect deadline passes, as a
 * streamed exec is (docs/e2b.md says what differs from envd).
 */
import { Code, ConnectError, type HandlerContext, type ServiceImpl } from '@connectrpc/connect';
import type { MessageInitShape } from '@bufbuild/protobuf';
import type { Core } from '../core/core.js';
import type { ProcessOutput } from '../core/types.js';
import { connectErrorOf } from './answers.js';
import { Process, type StartRequest, type StartResponseSchema } from './gen/process/process_pb.js';

/** Who calls, for one RPC: set by the envd routes (envd.ts) once the guard admitted the caller. */
export interface EnvdCaller {
  tenantId: string;
  runtimeId: string;
}

type StartEvent = MessageInitShape<typeof StartResponseSchema>;

/** The header in which E2B's SDK asks for keepalives, in seconds. */
export const KEEPALIVE_HEADER = 'keepalive-ping-interval';
const MIN_KEEPALIVE_SECS = 1;
const MAX_KEEPALIVE_SECS = 300;
/** A command without a Connect deadline (the SDK's timeoutMs: 0) runs at most this long, E2B's longest sandbox life. */
const NO_DEADLINE_SECS = 24 * 3600;

export function processService(core: Core, callerOf: (ctx: HandlerContext) => EnvdCaller): ServiceImpl<typeof Process> {
  return {
    async *start(req: StartRequest, ctx: HandlerContext): AsyncGenerator<StartEvent> {
      const caller = callerOf(ctx);
      const config = req.process;
      if (config === undefined || config.cmd === '') throw new ConnectError('process.cmd is required', Code.InvalidArgument);
      if (req.pty !== undefined) throw new ConnectError('a PTY is not served by this Vessel yet (docs/e2b.md)', Code.Unimplemented);
      if (req.stdin === true) throw new ConnectError('stdin is not served by this Vessel yet (docs/e2b.md)', Code.Unimplemented);
      const remainingMs = ctx.timeoutMs();
      let session;
      try {
        session = await core.processes.execStream(caller.tenantId, caller.runtimeId, {
          command: config.cmd,
          args: config.args,
          cwd: config.cwd ?? null,
          env: config.envs,
          stdin: null,
          maxOutputBytes: 0,
          timeoutSecs: remainingMs === undefined ? NO_DEADLINE_SECS : Math.max(1, Math.ceil(remainingMs / 1000)),
          background: false,
        });
      } catch (err) {
        throw connectErrorOf(err);
      }
      let ended = false;
      try {
        yield { event: { event: { case: 'start', value: { pid: session.process.pid } } } };
        for await (const item of withKeepalives(session.output, keepaliveMs(ctx.requestHeader.get(KEEPALIVE_HEADER)), ctx.signal)) {
          yield item === KEEPALIVE ? { event: { event: { case: 'keepalive', value: {} } } } : { event: { event: { case: 'data', value: { output: { case: item.channel, value: item.data } } } } };
        }
        const { exit_code: exitCode } = await session.result();
        ended = true;
        yield { event: { event: { case: 'end', value: { exitCode, exited: true, status: `exit status ${exitCode}` } } } };
      } catch (err) {
        throw connectErrorOf(err);
      } finally {
        if (!ended) session.abandon();
      }
    },
  };
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
