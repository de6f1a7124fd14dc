/**
 * The one way a command runs in a guest: spawned holding its output for its reader (no byte is
 * lost before it is delivered), stdin written as the guest takes it, and at the timeout a
 * SIGKILL of its whole tree. A streamed exec reads it as it comes; a buffered exec is the same
 * command collected (as E2B's SDK makes `run()` of `start()` and `wait()`), so both share one
 * timeout, one kill and one deadline error.
 */
import { constants as osConstants } from 'node:os';
import { VesselError } from './errors.js';
import type { GuestAgent } from './ports.js';
import type { ExecRequest, ExecResult, ProcessOutput, ProcessState, ProcessStream } from './types.js';

/** What running a command needs of a guest: start a process, and kill its tree at the deadline. */
export type CommandGuest = Pick<GuestAgent, 'spawnProcess' | 'signalProcess'>;

/** A command streamed to one caller. */
export interface ExecSession {
  readonly process: ProcessState;
  readonly output: AsyncIterable<ProcessOutput>;
  /** The exit code (128 + n for signal n) once the command ended; deadline_exceeded after a timeout. */
  result(): Promise<{ exit_code: number; duration_ms: number }>;
  /** The caller went away: the command's tree is killed, unless it was started in the background. */
  abandon(): void;
}

/**
 * How a streamed command runs beyond an exec's request: `background` (it outlives its reader),
 * and for E2B's envd (src/e2b) stdin kept open for later writes (`openStdin`) or a terminal.
 */
export interface StreamOptions {
  background: boolean;
  openStdin?: boolean | undefined;
  pty?: { rows: number; cols: number } | null | undefined;
}

/** Output a background process keeps per channel unless asked otherwise (the agent allows 4 KiB to 4 MiB). */
export const DEFAULT_RING_BYTES = 1024 * 1024;
/** A streamed command's ring: it holds the reader back, so the ring only matters once it leaves. */
const STREAM_RING_BYTES = 64 * 1024;
/**
 * How long a timed-out command's output may still flow after its tree was killed. A descendant
 * that left the tree before the walk (re-parented to init) can hold stdout open forever; the
 * stream is let go then.
 */
const KILL_GRACE_MS = 5000;

export const exitCodeOf = (p: ProcessState): number => (p.signal !== null ? 128 + p.signal : (p.exitCode ?? -1));

const deadline = (timeoutSecs: number) => new VesselError('deadline_exceeded', `command did not finish within ${timeoutSecs} s and was killed`);

/**
 * Starts the command and resolves once it runs; throws command_failed when it cannot start.
 * `onEnd` is called once, when the command ended, was abandoned, or could not start. Unless
 * `background`, the command is killed at its timeout or when its reader goes.
 */
export async function startCommand(guest: CommandGuest, req: ExecRequest & StreamOptions, onEnd: () => void = () => undefined): Promise<ExecSession> {
  const started = Date.now();
  let stream: ProcessStream;
  try {
    stream = await guest.spawnProcess({
      command: req.command,
      args: req.args,
      cwd: req.cwd,
      env: req.env,
      user: req.user,
      pty: req.pty ?? null,
      stdin: req.stdin !== null || req.openStdin === true,
      ringBytes: req.background ? DEFAULT_RING_BYTES : STREAM_RING_BYTES,
      hold: true,
      forgetOnExit: !req.background,
    });
  } catch (err) {
    onEnd();
    throw err;
  }
  if (req.stdin !== null) {
    const input = Buffer.from(req.stdin, 'utf8');
    // A command that exits without reading its stdin ends the stream first; nothing to report.
    void stream.write(input).then(() => stream.endInput(), () => undefined);
  }
  let timedOut = false;
  let finished = false;
  const kill = () => guest.signalProcess(stream.state.id, osConstants.signals.SIGKILL, true).catch(() => undefined);
  const timers = [
    setTimeout(() => {
      timedOut = true;
      void kill();
      timers.push(setTimeout(() => stream.detach(), KILL_GRACE_MS));
    }, Math.min(req.timeoutSecs * 1000, 2 ** 31 - 1)),
  ];
  const end = () => {
    if (finished) return;
    finished = true;
    for (const t of timers) clearTimeout(t);
    onEnd();
  };
  return {
    process: stream.state,
    output: stream,
    result: async () => {
      try {
        // A stream let go after the kill fails or ends early: either way, it was the deadline.
        const final = await stream.done.catch((err: unknown) => {
          throw timedOut ? deadline(req.timeoutSecs) : err;
        });
        if (timedOut) throw deadline(req.timeoutSecs);
        if (final === null) throw new VesselError('unavailable', 'the command\'s output stream ended before it exited');
        return { exit_code: exitCodeOf(final), duration_ms: Date.now() - started };
      } finally {
        end();
      }
    },
    abandon: () => {
      if (finished) return;
      end();
      if (!req.background) void kill();
      stream.detach();
    },
  };
}

/**
 * A buffered exec's result: each channel kept up to `maxOutputBytes`, `*_truncated` when more
 * came or bytes were lost, decoded as lossy UTF-8 (invalid sequences become U+FFFD).
 */
export async function collectCommand(session: ExecSession, maxOutputBytes: number): Promise<ExecResult> {
  const kept = { stdout: { parts: [] as Buffer[], bytes: 0, truncated: false }, stderr: { parts: [] as Buffer[], bytes: 0, truncated: false } };
  try {
    for await (const chunk of session.output) {
      const k = kept[chunk.channel];
      if (chunk.lost > 0) k.truncated = true;
      const room = maxOutputBytes - k.bytes;
      if (chunk.data.length > room) k.truncated = true;
      if (room > 0) {
        k.parts.push(room >= chunk.data.length ? chunk.data : chunk.data.subarray(0, room));
        k.bytes += Math.min(room, chunk.data.length);
      }
    }
  } catch (err) {
    // The result knows why the output failed (the deadline, or the guest gone); else this error stands.
    session.abandon();
    await session.result();
    throw err;
  }
  const { exit_code, duration_ms } = await session.result();
  return {
    exit_code,
    duration_ms,
    stdout: Buffer.concat(kept.stdout.parts).toString('utf8'),
    stdout_truncated: kept.stdout.truncated,
    stderr: Buffer.concat(kept.stderr.parts).toString('utf8'),
    stderr_truncated: kept.stderr.truncated,
  };
}

/** A buffered exec: the command started, and its output collected until it exits. */
export async function runBuffered(guest: CommandGuest, req: ExecRequest, onEnd?: () => void): Promise<ExecResult> {
  return collectCommand(await startCommand(guest, { ...req, background: false }, onEnd), req.maxOutputBytes);
}
