/**
 * `vessel logs RUNTIME`: the end of a runtime's serial console, for a boot that went wrong. The
 * guest wrote it, so on a terminal its control characters are shown, not obeyed: an escape
 * sequence from a guest must not retitle, recolour or reprogram the user's terminal.
 */
import type { Command } from 'commander';
import { clientAction, withJson } from '../shared/client.js';
import { printJson } from '../shared/output.js';
import { positiveNumber } from '../shared/parse.js';

/** Control characters but tab and newline in caret notation (ESC as ^[), C1 ones as <U+0085>; CR before LF dropped. */
export function showControls(text: string): string {
  return text
    .replace(/\r+\n/g, '\n')
    .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, (c) => `^${String.fromCharCode(c.charCodeAt(0) ^ 0x40)}`)
    .replace(/[\x80-\x9f]/g, (c) => `<U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}>`);
}

export function registerLogsCommand(program: Command): void {
  withJson(
    program
      .command('logs')
      .description("print the end of a runtime's serial console: its kernel's and init's boot messages, in any state")
      .argument('<runtime>', 'id or name')
      .option('--bytes <n>', 'how much of the end to print (default 65536, at most 1048576)', positiveNumber),
  ).action(
    clientAction(async (ctx, ref: string, flags: { bytes?: number }) => {
      const log = await ctx.vessel.runtimes.get(ref).then((rt) => rt.consoleLog({ maxBytes: flags.bytes }));
      if (ctx.json) return printJson(log);
      if (log.truncated) process.stderr.write(`vessel: earlier output not shown (--bytes for more)\n`);
      process.stdout.write(process.stdout.isTTY === true ? showControls(log.output) : log.output);
    }),
  );
}
