/**
 * `vessel exec RUNTIME -- CMD…`: output streamed as it comes, byte for byte (stdout to stdout,
 * stderr to stderr), and the command's exit status as the CLI's.
 */
import type { Command } from 'commander';
import type { ExecStreamRequest } from 'vessel/client';
import { clientAction, withJson } from '../shared/client.js';
import { streamCommand } from '../shared/command-output.js';
import { printJson } from '../shared/output.js';
import { keyValue, positiveNumber } from '../shared/parse.js';
import { readAll, utf8 } from '../shared/stdio.js';

interface ExecFlags {
  cwd?: string;
  env?: Record<string, string>;
  timeout?: number;
  stdin?: boolean;
  json?: boolean;
}

/** One word is run by /bin/sh -c (so `'make && ./run'` works); several are an argv, run as given. */
async function execBody(argv: string[], flags: ExecFlags): Promise<ExecStreamRequest> {
  const [command, ...args] = argv as [string, ...string[]];
  return {
    command,
    ...(args.length === 0 ? {} : { args }),
    ...(flags.cwd === undefined ? {} : { cwd: flags.cwd }),
    ...(flags.env === undefined ? {} : { env: flags.env }),
    ...(flags.timeout === undefined ? {} : { timeout_secs: flags.timeout }),
    ...(flags.stdin === true ? { stdin: utf8(await readAll(), 'stdin') } : {}),
  };
}

export function registerExecCommand(program: Command): void {
  withJson(
    program
      .command('exec')
      .description("run a command in a runtime, streaming its output; exits with the command's status")
      .argument('<runtime>', 'id or name')
      .argument('<command...>', "after --: one word is run by /bin/sh -c, several are the program and its arguments")
      .option('--cwd <dir>', 'working directory in the runtime')
      .option('-e, --env <KEY=VALUE>', 'an environment variable (repeat for more)', keyValue)
      .option('--timeout <secs>', 'kill the command and its children after this long (default 60); status 124', positiveNumber)
      .option('-i, --stdin', 'send this stdin (UTF-8 text, read to its end first) to the command'),
  )
    .addHelpText('after', "\nExamples:\n  vessel exec demo -- 'uname -a; exit 3'\n  vessel exec demo -- ls -la /root\n  echo hello | vessel exec -i demo -- wc -c   (text only: vessel cp moves binary files)")
    .action(
      clientAction(async (ctx, ref: string, argv: string[], flags: ExecFlags) => {
        const rt = await ctx.vessel.runtimes.get(ref);
        const body = await execBody(argv, flags);
        // --json is the buffered result: one object with both outputs, for a script to parse.
        if (ctx.json) {
          const result = await rt.exec(body);
          printJson(result);
          return result.exit_code;
        }
        return streamCommand(rt, body);
      }),
    );
}
