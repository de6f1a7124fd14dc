/**
 * Commander's own parse errors (an unknown command or option, a bad value, a missing argument)
 * as the CLI's usage errors, so that they are reported like every other error: one line, or one
 * JSON envelope with --json, and status 2. Commander is told to print none of them itself.
 */
import type { Command, CommanderError } from 'commander';
import { UsageError } from './exit-codes.js';

/**
 * --json anywhere before `--`, read from the words themselves: a parse that failed has assigned
 * no options, and a command without --json (or a group) fails on it as an unknown option.
 * After `--` it is a word of the command run in the runtime.
 */
export function jsonRequested(args: readonly string[]): boolean {
  const end = args.indexOf('--');
  return (end === -1 ? args : args.slice(0, end)).includes('--json');
}

/** Commander's ends that are help or the version, already printed: not errors to report. */
const DISPLAYS = new Set(['commander.helpDisplayed', 'commander.help', 'commander.version']);

export const isHelpOrVersion = (err: CommanderError): boolean => DISPLAYS.has(err.code);

/** The (sub)command the words name, and its names from the root: ['runtime', 'ls'] for `runtime ls --limit x`. */
export function commandOf(program: Command, args: readonly string[]): { command: Command; path: string[] } {
  const path: string[] = [];
  let command = program;
  for (const word of args) {
    if (word === '--') break;
    if (word.startsWith('-')) continue;
    const sub = command.commands.find((c) => c.name() === word || c.aliases().includes(word));
    if (sub === undefined) break;
    path.push(sub.name());
    command = sub;
  }
  return { command, path };
}

/** One line: the command, commander's message (without its `error: ` and line breaks), where the options are listed. */
export function usageErrorOf(err: CommanderError, program: Command, args: readonly string[]): UsageError {
  const { command, path: names } = commandOf(program, args);
  const path = names.join(' ');
  const message = err.message
    .replace(/^error: /, '')
    .replace(/\s*\n\s*/g, ' ')
    .trim();
  const help = `vessel help${path === '' ? '' : ` ${path}`} lists its ${command.commands.length > 0 ? 'commands' : 'options'}`;
  return new UsageError(`${path === '' ? '' : `${path}: `}${message}; ${help}`);
}
