/**
 * The `vessel` command's program. On the service's host: serve the API, manage tokens and quotas, build
 * the guest image. Anywhere: everything the API does, through the SDK (docs/cli.md).
 */
import { readFileSync } from 'node:fs';
import { Command, CommanderError } from 'commander';
import { registerAuditCommands } from './commands/audit.js';
import { registerCheckpointCommands } from './commands/checkpoint.js';
import { registerCompletionCommand } from './commands/completion.js';
import { registerCpCommand } from './commands/cp.js';
import { registerExecCommand } from './commands/exec.js';
import { registerHostCommands } from './commands/host.js';
import { registerLoginCommands } from './commands/login.js';
import { registerRuleCommands } from './commands/rule.js';
import { registerRuntimeCommands } from './commands/runtime.js';
import { registerSecretCommands } from './commands/secret.js';
import { registerShellCommand } from './commands/shell.js';
import { registerTokenCommands } from './commands/token.js';
import { registerLogsCommand } from './commands/logs.js';
import { reportError } from './shared/client.js';
import { EXIT, exitCodeOf } from './shared/exit-codes.js';
import { isHelpOrVersion, jsonRequested, usageErrorOf } from './shared/usage-errors.js';

const { version } = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };

export function buildProgram(): Command {
  const program = new Command('vessel')
    .description('Self-hosted microVM sandboxes behind one REST API')
    .version(version, '-V, --version')
    // Commander would print its errors its own way and exit 1, the status of a failed request;
    // it throws instead, and runCli() reports them as usage errors. Subcommands inherit both
    // settings from the commands that make them, so they are set before any is made.
    .exitOverride()
    .configureOutput({ outputError: () => undefined });

  registerLoginCommands(program);
  registerRuntimeCommands(program);
  registerExecCommand(program);
  registerShellCommand(program);
  registerCpCommand(program);
  registerCheckpointCommands(program);
  registerSecretCommands(program);
  registerRuleCommands(program);
  registerAuditCommands(program);
  registerLogsCommand(program);
  registerTokenCommands(program);
  registerCompletionCommand(program);
  registerHostCommands(program);
  return program;
}

/**
 * Runs a command line (the words after `vessel`). A failure that leaves a command, commander's
 * parse errors included, is reported here, once, and its exit status returned; 0 means the
 * command ended normally (a client command exits by itself; `serve` runs on).
 */
export async function runCli(args: string[], { program = buildProgram(), stderr = process.stderr }: { program?: Command; stderr?: Pick<NodeJS.WritableStream, 'write'> } = {}): Promise<number> {
  try {
    await program.parseAsync(args, { from: 'user' });
    return EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError && isHelpOrVersion(err)) return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
    const failure = err instanceof CommanderError ? usageErrorOf(err, program, args) : err;
    reportError(failure, jsonRequested(args), stderr);
    return exitCodeOf(failure);
  }
}
