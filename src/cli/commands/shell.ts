/**
 * `vessel shell RUNTIME`: a login shell on a terminal in the runtime. On a local terminal it
 * goes raw, so that every key (Ctrl-C, Ctrl-D, arrows) reaches the remote side, where the
 * remote line discipline does what a local one would; a window resize follows. The terminal is
 * restored however the CLI ends, and the CLI exits with the shell's status.
 *
 * With stdin from a pipe or a file there is no terminal, as with `ssh host < script`: the login
 * shell runs as a process with its stdin open and no PTY (docs/processes.md), the CLI's stdin
 * goes to it chunk by chunk as it arrives (raw bytes, one write in flight: stdin is not read
 * further until the guest took the last chunk), the end of input closes the shell's stdin, and
 * its stdout and stderr come back as they are produced. Through a PTY it could not be: a
 * terminal has no end of input, only a ^D byte that bash's readline ignores while its line holds
 * text, and that the kernel turns into a NUL byte when it was queued before readline started.
 */
import { constants as osConstants } from 'node:os';
import type { Command } from 'commander';
import type { Runtime, SignalName } from 'vessel/client';
import { VesselError } from '../../../client/errors.js';
import { clientAction, exitWith } from '../shared/client.js';
import { EXIT_BROKEN_PIPE } from '../shared/command-output.js';
import { CliError, EXIT } from '../shared/exit-codes.js';
import { writeTo } from '../shared/stdio.js';

/** The terminal's login shell (docs/processes.md, "Terminals"), for piped input too. */
const LOGIN_SHELL = { command: '/bin/bash', args: ['-l'] };
/**
 * What the guest keeps of each channel of a piped shell's output (the API's most): a process does
 * not wait for its reader, so output a slow local reader has not taken yet waits here.
 */
const RING_BYTES = 4 * 1024 * 1024;

type Processes = Runtime['processes'];

/**
 * Sends the CLI's stdin to the process as it arrives, then closes the process's stdin. One chunk
 * is in flight at a time and the next is read only once the guest took it, so a producer faster
 * than the runtime waits (the pipe fills) instead of filling memory. Stops reading when
 * `ended()` (the shell exited), or when the process no longer takes input (its stdin closed).
 */
async function feedStdin(processes: Processes, id: number, ended: () => boolean): Promise<void> {
  try {
    for await (const chunk of process.stdin as AsyncIterable<Buffer>) {
      if (ended()) return;
      await processes.stdin(id, chunk);
    }
    if (!ended()) await processes.stdin(id, new Uint8Array(0), { eof: true });
  } catch (err) {
    // The shell exited, or closed its stdin, while input was still coming: it reads no more.
    if (ended() || (err instanceof VesselError && err.code === 'failed_precondition')) return;
    throw err;
  } finally {
    process.stdin.destroy();
  }
}

/**
 * The login shell with the piped input as its stdin, streamed both ways; the CLI exits with its
 * status. Ctrl-C sends SIGINT to the shell's tree, a second one SIGKILL (a third leaves without
 * waiting); a local reader that went away (EPIPE) or a failure of the CLI kills the tree, which
 * would otherwise wait for ever on a stdin nobody closes.
 */
async function pipedShell(rt: Runtime): Promise<number> {
  const processes = rt.processes;
  let id: number | undefined;
  const signalShell = async (name: SignalName) => {
    if (id !== undefined) await processes.signal(id, name).catch(() => undefined);
  };
  let ended = false;
  let interrupts = 0;
  const onInterrupt = () => {
    interrupts++;
    // Nothing runs yet to take the signal: say what will happen rather than seem to ignore it.
    if (id === undefined && interrupts === 1) process.stderr.write('vessel: interrupted; the shell is stopped as soon as it has started\n');
    if (interrupts === 1) void signalShell('SIGINT');
    else if (interrupts === 2) void signalShell('SIGKILL');
    else void exitWith(EXIT.interrupted);
  };
  // As closing an ssh session does: the shell's tree gets SIGHUP.
  const onHangup = (signal: 'SIGHUP' | 'SIGTERM') => () => void signalShell('SIGHUP').finally(() => exitWith(128 + osConstants.signals[signal]));
  const hangups = { SIGHUP: onHangup('SIGHUP'), SIGTERM: onHangup('SIGTERM') };
  process.on('SIGINT', onInterrupt);
  for (const [signal, handler] of Object.entries(hangups)) process.once(signal, handler);
  const abort = new AbortController();
  try {
    const started = await processes.start({ ...LOGIN_SHELL, stdin: true, ring_bytes: RING_BYTES });
    id = started.id;
    // Ctrl-C while the shell was starting: it has run nothing yet, so it is not left behind.
    if (interrupts > 0) {
      await signalShell('SIGKILL');
      return EXIT.interrupted;
    }
    return await streamShell(processes, started.id, abort.signal, (done) => (ended ||= done));
  } catch (err) {
    ended = true;
    await signalShell('SIGKILL');
    // `… | head`: the reader went away, as a shell reports a pipe nobody reads.
    if ((err as NodeJS.ErrnoException).code === 'EPIPE') return EXIT_BROKEN_PIPE;
    throw err;
  } finally {
    ended = true;
    abort.abort();
    process.off('SIGINT', onInterrupt);
    for (const [signal, handler] of Object.entries(hangups)) process.off(signal, handler);
  }
}

/**
 * Input and output of the running shell, until it exits: its status. `ended(true)` records the
 * exit, `ended(false)` asks whether it happened (or the CLI is leaving).
 */
async function streamShell(processes: Processes, id: number, signal: AbortSignal, ended: (done: boolean) => boolean): Promise<number> {
  const fed = feedStdin(processes, id, () => ended(false));
  // The output loop is abandoned if the input fails: that failure is the one reported.
  const inputFailed = fed.then(() => new Promise<never>(() => undefined));
  const output = (async () => {
    const events = await processes.output(id, { signal });
    for await (const event of events) {
      if (event.type === 'stdout' || event.type === 'stderr') {
        if (event.chunk.lost > 0) await writeTo(process.stderr, Buffer.from(`vessel: ${event.chunk.lost} bytes of the shell's ${event.type} were lost: it wrote faster than this reader took them\n`));
        await writeTo(event.type === 'stdout' ? process.stdout : process.stderr, event.chunk.bytes);
      } else if (event.type === 'exit') {
        ended(true);
        const { exit_code, signal: signalNumber } = event.process;
        return exit_code ?? (signalNumber === null ? EXIT.failure : 128 + signalNumber);
      }
    }
    throw new CliError('the output stream ended before the shell exited', EXIT.unavailable);
  })();
  output.catch(() => undefined);
  const status = await Promise.race([output, inputFailed]);
  await processes.forget(id).catch(() => undefined);
  return status;
}

export function registerShellCommand(program: Command): void {
  program
    .command('shell')
    .description("an interactive shell in a runtime (a login shell on a terminal); exits with the shell's status")
    .argument('<runtime>', 'id or name')
    .action(
      clientAction(async (ctx, ref: string) => {
        const rt = await ctx.vessel.runtimes.get(ref);
        const { stdin, stdout } = process;
        if (!stdin.isTTY) return pipedShell(rt);
        const size = stdout.isTTY ? { rows: stdout.rows, cols: stdout.columns } : {};
        const terminal = await rt.terminal({ ...size, onData: (bytes) => stdout.write(bytes) });

        const restore = () => {
          if (stdin.isRaw) stdin.setRawMode(false);
        };
        process.once('exit', restore);
        // A closed terminal (SIGHUP) or a kill ends the CLI without an exit event: restore first.
        for (const signal of ['SIGHUP', 'SIGTERM'] as const) {
          process.once(signal, () => {
            restore();
            process.exit(128 + osConstants.signals[signal]);
          });
        }
        stdin.setRawMode(true);
        stdin.on('data', (bytes: Buffer) => terminal.write(bytes));
        const onResize = () => terminal.resize(stdout.rows, stdout.columns);
        if (stdout.isTTY) stdout.on('resize', onResize);

        try {
          const exit = await terminal.wait();
          if (exit.exit_code === null) throw new CliError('the terminal closed before the shell exited', EXIT.unavailable);
          return exit.exit_code;
        } finally {
          stdout.off('resize', onResize);
          restore();
          stdin.pause();
        }
      }),
    );
}
