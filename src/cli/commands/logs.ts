/**
 * `vessel logs RUNTIME`: the end of a runtime's serial console, for a boot that went wrong. The
 * guest wrote it, so its control characters are shown, not obeyed (shared/visible.ts): an escape
 * sequence from a guest must not retitle, recolour or reprogram the user's terminal, nor write
 * its clipboard. --raw passes the bytes as they are, for a file or a program that wants them.
 */
import type { Command } from 'commander';
import { clientAction, withJson } from '../shared/client.js';
import { printJson } from '../shared/output.js';
import { positiveNumber } from '../shared/parse.js';
import { visibleText } from '../shared/visible.js';

export function registerLogsCommand(program: Command): void {
  withJson(
    program
      .command('logs')
      .description("print the end of a runtime's serial console: its kernel's and init's boot messages, in any state")
      .argument('<runtime>', 'id or name')
      .option('--bytes <n>', 'how much of the end to print (default 65536, at most 1048576)', positiveNumber)
      .option('--raw', 'print control characters as they are, not made visible (^[ for ESC)'),
  ).action(
    clientAction(async (ctx, ref: string, flags: { bytes?: number; raw?: boolean }) => {
      const log = await ctx.vessel.runtimes.get(ref).then((rt) => rt.consoleLog({ maxBytes: flags.bytes }));
      if (ctx.json) return printJson(log);
      if (log.truncated) process.stderr.write(`vessel: earlier output not shown (--bytes for more)\n`);
      process.stdout.write(flags.raw === true ? log.output : visibleText(log.output));
    }),
  );
}
