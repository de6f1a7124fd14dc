/**
 * The CLI's shared pieces without a service: where settings come from and how the file is
 * written, tables, `RUNTIME:/path`, docs/cli.md's exit table against the code, and the
 * completion scripts, run in bash and zsh as those shells would run them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseLocation } from '../../src/cli/commands/cp-transfer.js';
import { EXIT, EXIT_CODES, exitCodeOf, UsageError } from '../../src/cli/shared/exit-codes.js';
import { formatTable } from '../../src/cli/shared/output.js';
import { configPath, readConfig, resolveSettings, writeConfig } from '../../src/cli/shared/settings.js';
import { VesselError } from '../../client/index.js';
import { CLI } from '../support/cli.js';
import { REPO_ROOT } from '../support/service.js';

test('settings: the environment first, then the file; its path from VESSEL_CONFIG, XDG_CONFIG_HOME or HOME', () => {
  assert.equal(configPath({ HOME: '/h' }), '/h/.config/vessel/config.json');
  assert.equal(configPath({ HOME: '/h', XDG_CONFIG_HOME: '/x' }), '/x/vessel/config.json');
  assert.equal(configPath({ HOME: '/h', XDG_CONFIG_HOME: '/x', VESSEL_CONFIG: '/c.json' }), '/c.json');

  const dir = mkdtempSync(join(tmpdir(), 'vessel-settings-'));
  const path = join(dir, 'sub', 'config.json');
  const old = process.umask(0);
  try {
    writeConfig(path, { url: 'http://saved:1', token: 'vsl_saved' });
  } finally {
    process.umask(old);
  }
  assert.equal(statSync(path).mode & 0o777, 0o600);
  writeConfig(path, { url: 'http://saved:2', token: 'vsl_saved2' });
  assert.deepEqual(readConfig(path), { url: 'http://saved:2', token: 'vsl_saved2' });

  const env = { VESSEL_CONFIG: path };
  assert.deepEqual(resolveSettings(env), { url: 'http://saved:2', token: 'vsl_saved2' });
  assert.deepEqual(resolveSettings({ ...env, VESSEL_TOKEN: 'vsl_env' }), { url: 'http://saved:2', token: 'vsl_env' });
  assert.deepEqual(resolveSettings({ ...env, VESSEL_URL: 'http://env:3/' }), { url: 'http://env:3', token: 'vsl_saved2' });
  assert.deepEqual(resolveSettings({ VESSEL_CONFIG: join(dir, 'none.json'), VESSEL_TOKEN: 't' }), { url: 'http://127.0.0.1:8080', token: 't' });
  assert.throws(() => resolveSettings({ VESSEL_CONFIG: join(dir, 'none.json') }), (e: unknown) => e instanceof UsageError && /no token/.test(e.message));

  chmodSync(path, 0o640);
  assert.throws(() => resolveSettings(env), /readable by others \(mode 640\)/);
  writeFileSync(join(dir, 'bad.json'), '{', { mode: 0o600 });
  assert.throws(() => readConfig(join(dir, 'bad.json')), /not valid JSON/);
});

test('tables: columns padded to the widest cell, no trailing blanks', () => {
  assert.equal(formatTable(['NAME', 'ID'], [['a', '1'], ['longer', '22']]), 'NAME    ID\na       1\nlonger  22\n');
  assert.equal(formatTable(['A', 'B'], [['x', '']]), 'A  B\nx\n');
});

test('cp locations: RUNTIME:/absolute is a runtime, anything else local', () => {
  assert.deepEqual(parseLocation('demo:/root/x'), { runtime: 'demo', path: '/root/x' });
  assert.deepEqual(parseLocation('0b8e5c1e-5d0f-4a51-9b57-8d2f1b1f2c3d:/'), { runtime: '0b8e5c1e-5d0f-4a51-9b57-8d2f1b1f2c3d', path: '/' });
  assert.deepEqual(parseLocation('./demo:/x'), { local: './demo:/x' });
  assert.deepEqual(parseLocation('/tmp/a:b'), { local: '/tmp/a:b' });
  assert.deepEqual(parseLocation('-'), { local: '-' });
  assert.throws(() => parseLocation('demo:relative'), (e: unknown) => e instanceof UsageError);
});

test("docs/cli.md's exit table says what the code does, for every error code", () => {
  const doc = readFileSync(join(REPO_ROOT, 'docs/cli.md'), 'utf8');
  const table = doc.slice(doc.indexOf('## Exit statuses'), doc.indexOf('## Commands'));
  const documented = new Map<string, number>();
  for (const [, status, meaning] of table.matchAll(/^\| (\d+) \| (.*) \|$/gm)) {
    for (const [, code] of meaning!.matchAll(/`([a-z_]+)`/g)) documented.set(code!, Number(status));
  }
  assert.deepEqual(Object.fromEntries([...documented].sort()), Object.fromEntries(Object.entries(EXIT_CODES).sort()));
  for (const status of Object.values(EXIT)) assert.match(table, new RegExp(`^\\| ${status} \\|`, 'm'), `status ${status} is documented`);
  assert.equal(exitCodeOf(new VesselError('not_found', 'x', { status: 404 })), 3);
  assert.equal(exitCodeOf(new Error('x')), 1);
});

function completion(shell: 'bash' | 'zsh'): string {
  const r = spawnSync(process.execPath, [CLI, 'completion', shell], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

/** A stand-in `vessel` on PATH for the scripts' runtime names. */
function fakeVesselOnPath(): string {
  const bin = mkdtempSync(join(tmpdir(), 'vessel-bin-'));
  writeFileSync(join(bin, 'vessel'), '#!/bin/sh\n[ "$*" = "runtime ls --quiet" ] && printf "demo\\ndev\\n"\n', { mode: 0o755 });
  return `${bin}:${process.env.PATH}`;
}

test('bash completion: commands, aliases, options, runtime names, files after --', () => {
  const script = join(mkdtempSync(join(tmpdir(), 'vessel-completion-')), 'vessel.bash');
  writeFileSync(script, completion('bash'));
  const complete = (...words: string[]) => {
    // stdin from /dev/null: bash reads ~/.bashrc even with -c when its stdin is a socket (as if
    // run by rshd), and Node's pipes are sockets; a test machine's rc (pyenv's, 1.5 s) is not ours.
    const r = spawnSync('bash', ['-c', `source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); _vessel_complete; printf '%s\\n' "\${COMPREPLY[@]}"`, script, ...words], {
      stdio: ['ignore', 'pipe', 'pipe'],
      encoding: 'utf8',
      env: { PATH: fakeVesselOnPath() },
      cwd: REPO_ROOT,
    });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim().split('\n').sort();
  };
  assert.ok(complete('vessel', '').includes('runtime') && complete('vessel', '').includes('completion'));
  assert.deepEqual(complete('vessel', 'runtime', 'cr'), ['create']);
  assert.deepEqual(complete('vessel', 'runtime', 'list', '--'), ['--help', '--json', '--label', '--limit', '--quiet', '--status']);
  assert.deepEqual(complete('vessel', 'runtime', 'create', '--vc'), ['--vcpus']);
  assert.deepEqual(complete('vessel', 'exec', '--cwd', '/tmp', 'd'), ['demo', 'dev']);
  assert.deepEqual(complete('vessel', 'checkpoint', 'create', '--name', 'x', 'de'), ['demo', 'dev']);
  assert.deepEqual(complete('vessel', 'exec', 'demo', '--', 'packa'), ['package-lock.json', 'package.json']);
  assert.deepEqual(complete('vessel', 'fork', 'snap', 'x', '--allow-host', 'packa'), ['package-lock.json', 'package.json']);
});

test('zsh completion: the same answers, with descriptions', (t) => {
  if (spawnSync('zsh', ['--version']).status !== 0) return t.skip('zsh is not installed');
  const script = join(mkdtempSync(join(tmpdir(), 'vessel-completion-')), '_vessel');
  writeFileSync(script, completion('zsh'));
  // compsys's functions, stubbed to print what they were given.
  const stubs = 'compdef() {}; _describe() { print -rl -- "${(@P)${@[-1]}}"; }; compadd() { print -rl -- "${(@P)${@[-1]}}"; }; _files() { print FILES; }';
  const complete = (...words: string[]) => {
    const r = spawnSync('zsh', ['-c', `${stubs}; source "$1"; shift; words=("$@"); CURRENT=$#; PREFIX="\${@[-1]}"; _vessel`, 'zsh', script, ...words], {
      encoding: 'utf8',
      env: { PATH: fakeVesselOnPath() },
    });
    assert.equal(r.status, 0, r.stderr);
    return r.stdout.trim().split('\n');
  };
  assert.ok(complete('vessel', 'runtime', 'cr').includes('create:create a runtime; answers once its VM runs'));
  assert.ok(complete('vessel', 'runtime', 'create', '--v').includes('--vcpus:virtual CPUs (default 1)'));
  assert.deepEqual(complete('vessel', 'shell', ''), ['demo', 'dev']);
  assert.deepEqual(complete('vessel', 'exec', 'demo', '--', ''), ['FILES']);
});
