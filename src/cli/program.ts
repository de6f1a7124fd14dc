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
import { EXIT, exitCodeOf } from './shared/exit-codes.js';

const { version } = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };

const program = new Command('vessel')
  .description('Self-hosted microVM sandboxes behind one REST API')
  .version(version, '-V, --version')
  // Commander would exit 1 on a usage error, the status of a failed request; it throws instead,
  // and is given 2 below. Subcommands inherit this from the commands that make them.
  .exitOverride()
  .showHelpAfterError('(vessel help <command> shows its options)');

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

program.parseAsync().catch((err: unknown) => {
  if (err instanceof CommanderError) {
    // Commander has printed the message (or the help, or the version) already.
    process.exit(err.exitCode === 0 ? EXIT.ok : EXIT.usage);
  }
  process.stderr.write(`vessel: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(exitCodeOf(err));
});
