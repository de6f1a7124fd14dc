/**
 * Every usage error of every command, commander's own included, as docs/cli.md promises: status
 * 2 and one line `vessel: … (usage)` on stderr, or with --json one envelope with code `usage`.
 * The cases are made by walking the program's command tree, so a new command or option is
 * covered without a line here: for each command an unknown option, an invalid value for each
 * option that can have one, no argument where one is required, and an unknown subcommand for
 * the root and each group. They run in-process (runCli, nothing is sent anywhere: each fails
 * while parsing); a few run the compiled CLI as a child process, end to end.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidArgumentError, type Command, type Option } from 'commander';
import { buildProgram, runCli } from '../../src/cli/program.js';
import { cliUser } from '../support/cli.js';

const BAD_VALUE = '!bogus';

interface Case {
  what: string;
  args: string[];
  /** In the message of the error without --json. */
  says: string;
}

function walk(command: Command, path: string[] = []): { command: Command; path: string[] }[] {
  return [{ command, path }, ...command.commands.flatMap((sub) => walk(sub, [...path, sub.name()]))];
}

/** An option refuses BAD_VALUE when it has choices, or a parser that throws on it. */
function refusesBadValue(option: Option): boolean {
  if (!option.required && !option.optional) return false;
  if (option.argChoices !== undefined) return true;
  if (option.parseArg === undefined) return false;
  try {
    option.parseArg(BAD_VALUE, undefined);
    return false;
  } catch (err) {
    return err instanceof InvalidArgumentError;
  }
}

/** A value the option takes: its first choice, else one its parser accepts. */
function goodValue(option: Option): string {
  if (option.argChoices !== undefined) return option.argChoices[0]!;
  const accepted = ['x', '1', 'x=1'].find((v) => {
    try {
      option.parseArg?.(v, undefined);
      return true;
    } catch {
      return false;
    }
  });
  assert.ok(accepted !== undefined, `a value for ${option.flags}`);
  return accepted;
}

/**
 * The command's words with all it requires (its arguments, its mandatory options), so that the
 * one mistake a case adds is the error reported, not another that commander checks first.
 */
function complete(command: Command, path: string[], withArguments = true): string[] {
  const args = withArguments ? command.registeredArguments.filter((a) => a.required).map(() => 'x') : [];
  const options = command.options.filter((o) => o.mandatory).flatMap((o) => [o.long!, goodValue(o)]);
  return [...path, ...args, ...options];
}

function cases(): Case[] {
  const all: Case[] = [];
  for (const { command, path } of walk(buildProgram())) {
    const name = path.length === 0 ? 'vessel' : path.join(' ');
    if (command.commands.length > 0) {
      all.push({ what: `${name}: an unknown command`, args: [...path, 'no-such-command'], says: "unknown command 'no-such-command'" });
      all.push({ what: `${name}: an unknown option`, args: [...path, '--no-such-option'], says: "unknown option '--no-such-option'" });
      continue;
    }
    all.push({ what: `${name}: an unknown option`, args: [...complete(command, path), '--no-such-option'], says: "unknown option '--no-such-option'" });
    for (const option of command.options.filter(refusesBadValue)) {
      all.push({ what: `${name}: an invalid ${option.long}`, args: [...complete(command, path), option.long!, BAD_VALUE], says: `option '${option.flags}' argument '${BAD_VALUE}' is invalid` });
    }
    if (command.registeredArguments.some((a) => a.required)) {
      all.push({ what: `${name}: no argument`, args: complete(command, path, false), says: 'missing required argument' });
    }
  }
  return all;
}

async function run(args: string[]): Promise<{ status: number; err: string }> {
  let err = '';
  const status = await runCli(args, { stderr: { write: (text: string | Uint8Array) => ((err += String(text)), true) } });
  return { status, err };
}

test('the cases cover every kind on the commands that have it', () => {
  const all = cases();
  for (const what of ['vessel: an unknown command', 'runtime ls: an invalid --limit', 'audit ls: an invalid --category', 'exec: no argument', 'fork: no argument', 'serve: an invalid --role', 'shell: an unknown option']) {
    assert.ok(all.some((c) => c.what === what), what);
  }
  assert.ok(all.length > 100, `${all.length} cases`);
});

test('each usage error is one line, `vessel: … (usage)`, and status 2', async () => {
  for (const c of cases()) {
    const r = await run(c.args);
    assert.equal(r.status, 2, `${c.what}: status`);
    assert.match(r.err, /^vessel: [^\n]+ \(usage\)\n$/, `${c.what}: one line`);
    assert.ok(r.err.includes(c.says), `${c.what}: ${r.err}`);
  }
});

test('with --json, each is one JSON envelope with code usage, and status 2', async () => {
  for (const c of cases()) {
    for (const args of [[...c.args, '--json'], ['--json', ...c.args]]) {
      const r = await run(args);
      assert.equal(r.status, 2, `${c.what}: status`);
      const lines = r.err.split('\n');
      assert.deepEqual([lines.length, lines[1]], [2, ''], `${c.what}: one line: ${r.err}`);
      const envelope = JSON.parse(lines[0]!);
      assert.deepEqual(Object.keys(envelope), ['error']);
      assert.deepEqual([Object.keys(envelope.error), envelope.error.code], [['code', 'message'], 'usage'], `${c.what}: ${r.err}`);
    }
  }
});

test('--json after `--` is the command\'s word, not the CLI\'s', async () => {
  const r = await run(['exec', '--', '--json']);
  assert.match(r.err, /^vessel: exec: missing required argument/);
});

test('the compiled CLI: the same on stderr, nothing on stdout; help and the version as before', async () => {
  const user = cliUser();
  const bad = await user.run(['runtime', 'ls', '--limit', 'abc', '--json']);
  assert.deepEqual([bad.status, bad.out], [2, '']);
  assert.equal(JSON.parse(bad.err).error.code, 'usage');
  assert.equal(bad.err.split('\n').length, 2);
  const unknown = await user.run(['bogus']);
  assert.deepEqual([unknown.status, unknown.out], [2, '']);
  assert.match(unknown.err, /^vessel: unknown command 'bogus'[^\n]* \(usage\)\n$/);
  // An error thrown by a command before it runs (a hook), not by the parser.
  const argv = await user.run(['secret', 'create', 'x', 'value', '--json']);
  assert.deepEqual([argv.status, JSON.parse(argv.err).error.code], [2, 'usage']);
  const help = await user.run(['runtime', 'ls', '--help']);
  assert.deepEqual([help.status, help.err], [0, '']);
  assert.match(help.out, /^Usage: vessel runtime ls\|list \[options\]/);
  const version = await user.run(['--version']);
  assert.deepEqual([version.status, version.err], [0, '']);
  assert.match(version.out, /^\d+\.\d+\.\d+/);
});
