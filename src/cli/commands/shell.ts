/**
 * `vessel shell RUNTIME`: a login shell on a terminal in the runtime. On a local terminal it
 * goes raw, so that every key (Ctrl-C, Ctrl-D, arrows) reaches the remote side, where the
 * remote line discipline does what a local one would; a window resize follows. The terminal is
 * restored however the CLI ends, and the CLI exits with the shell's status.
 *
 * With stdin from a pipe or a file there is no terminal: the login shell reads its commands
 * from that input, as `ssh host < script` does, and its end is the end of the shell's input.
 * Through a PTY it could not be: a terminal has no end of input, only a ^D byte that means one
 * to some readers, and not to bash's readline while its line holds text, nor once the kernel
 * has turned a ^D queued in canonical mode into a NUL byte as readline leaves that mode (input
 * that arrived while the shell started). Such a session waited for ever after its last line.
 */
import { constants as osConstants } from 'node:os';
import type { Command } from 'commander';
import type { Runtime } from 'vessel/client';
import { clientAction } from '../shared/client.js';
import { streamCommand } from '../shared/command-output.js';
import { CliError, EXIT } from '../shared/exit-codes.js';
import { readAll, utf8 } from '../shared/stdio.js';

/** The terminal's login shell (docs/processes.md, "Terminals"), for piped input too. */
const LOGIN_SHELL = { command: '/bin/bash', args: ['-l'] };
/** The longest the service's timer holds (24.8 days): a shell has no time limit on a terminal either. */
const NO_TIMEOUT_SECS = Math.floor((2 ** 31 - 1) / 1000);

/** The login shell with the piped input as its stdin; its stdout and stderr as the CLI's own. */
async function pipedShell(rt: Runtime): Promise<number> {
  const stdin = utf8(await readAll(), 'the input of vessel shell');
  return streamCommand(rt, { ...LOGIN_SHELL, stdin, timeout_secs: NO_TIMEOUT_SECS });
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
