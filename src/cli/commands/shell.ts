/**
 * `vessel shell RUNTIME`: a login shell on a terminal in the runtime. On a local terminal it
 * goes raw, so that every key (Ctrl-C, Ctrl-D, arrows) reaches the remote side, where the
 * remote line discipline does what a local one would; a window resize follows. The terminal is
 * restored however the CLI ends, and the CLI exits with the shell's status.
 */
import { constants as osConstants } from 'node:os';
import type { Command } from 'commander';
import { clientAction } from '../shared/client.js';
import { CliError, EXIT } from '../shared/exit-codes.js';

/** What a terminal sends for end of input: a pipe's end becomes it, so `echo ls | vessel shell x` ends. */
const EOT = Uint8Array.of(4);

export function registerShellCommand(program: Command): void {
  program
    .command('shell')
    .description("an interactive shell in a runtime (a login shell on a terminal); exits with the shell's status")
    .argument('<runtime>', 'id or name')
    .action(
      clientAction(async (ctx, ref: string) => {
        const rt = await ctx.vessel.runtimes.get(ref);
        const { stdin, stdout } = process;
        const size = stdout.isTTY ? { rows: stdout.rows, cols: stdout.columns } : {};
        const terminal = await rt.terminal({ ...size, onData: (bytes) => stdout.write(bytes) });

        const raw = stdin.isTTY;
        const restore = () => {
          if (raw && stdin.isRaw) stdin.setRawMode(false);
        };
        process.once('exit', restore);
        // A closed terminal (SIGHUP) or a kill ends the CLI without an exit event: restore first.
        for (const signal of ['SIGHUP', 'SIGTERM'] as const) {
          process.once(signal, () => {
            restore();
            process.exit(128 + osConstants.signals[signal]);
          });
        }
        if (raw) stdin.setRawMode(true);
        stdin.on('data', (bytes: Buffer) => terminal.write(bytes));
        stdin.once('end', () => terminal.write(EOT));
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
