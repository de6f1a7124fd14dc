/**
 * A first start on a fresh cloud host, where unattended-upgrades holds apt's locks: the installer
 * waits for them, bounded, and says so (src/vm/host-packages.ts), and so does .ci/run. The last
 * two tests hold the locks for real and run the real apt-get: dpkg's frontend lock, which apt
 * waits for itself given DPkg::Lock::Timeout, and the lists lock of `apt-get update`, which it
 * does not (apt 2.6), so runApt() retries.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { APT_LOCK_TIMEOUT_SECS, DPKG_FRONTEND_LOCK, aptGetArgs, installCommand, lockHolder, runApt } from '../../src/vm/host-packages.js';
import { REPO_ROOT } from '../support/service.js';

const TIMEOUT_OPTION = /^-o DPkg::Lock::Timeout=\d+$/;

test('every apt-get of the installer waits for dpkg\'s lock, bounded', () => {
  const command = installCommand(['qemu-utils', 'cpio']);
  const calls = command.split('&&').map((c) => c.trim().replace(/^DEBIAN_FRONTEND=\S+ /, ''));
  assert.equal(calls.length, 2);
  for (const call of calls) {
    assert.match(call, new RegExp(`^apt-get -o DPkg::Lock::Timeout=${APT_LOCK_TIMEOUT_SECS} (update|install )`), call);
  }
  assert.deepEqual(aptGetArgs(['check'], 4.2), ['-o', 'DPkg::Lock::Timeout=5', 'check']);
  assert.deepEqual(aptGetArgs(['check'], -3), ['-o', 'DPkg::Lock::Timeout=0', 'check']);
});

const ciRun = () => readFileSync(join(REPO_ROOT, '.ci/run'), 'utf8');
/** .ci/run's helper, to run by itself. */
const ciHelper = () => /^apt_get_waiting\(\) \{[\s\S]*?\n\}$/m.exec(ciRun())?.[0] ?? '';

test('.ci/run waits for apt\'s locks in each apt-get it runs', () => {
  const script = ciRun();
  const calls = script
    .split('\n')
    .filter((line) => !line.trimStart().startsWith('#'))
    .flatMap((line) => [...line.matchAll(/\bapt-get\s+(.*)$/g)].map((m) => m[1]!));
  assert.ok(calls.length >= 1);
  for (const rest of calls) assert.match(rest, /^-o DPkg::Lock::Timeout=/, `apt-get ${rest}`);
  // update and install both go through the helper, which runs apt-get again while a lock is held.
  assert.match(script, /^apt_get_waiting update\b/m);
  assert.match(script, /^apt_get_waiting install\b/m);
  assert.match(ciHelper(), /Could not get lock/);
});

test('lockHolder finds the writer of a file in /proc/locks by its inode', () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-lock-'));
  try {
    const path = join(dir, 'lock');
    writeFileSync(path, '');
    const ino = spawnSync('stat', ['-c', '%i', path], { encoding: 'utf8' }).stdout.trim();
    const locks = `1: POSIX  ADVISORY  READ 31658 fe:00:2146496 128 128\n2: POSIX  ADVISORY  WRITE ${process.pid} fe:00:${ino} 0 EOF\n`;
    assert.deepEqual(lockHolder(path, locks), { pid: process.pid, command: readFileSync('/proc/self/comm', 'utf8').trim() });
    assert.equal(lockHolder(path, '1: POSIX  ADVISORY  WRITE 42 fe:00:1 0 EOF\n'), null);
    assert.equal(lockHolder(join(dir, 'missing'), locks), null);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

const LISTS_LOCKED = (path: string) => new Error(`apt-get -o DPkg::Lock::Timeout=600 update failed (100):\nReading package lists...\nE: Could not get lock ${path}. It is held by process 1187 (apt-get)\nE: Unable to lock directory /var/lib/apt/lists/`);

test('runApt runs apt-get again while another holds a lock it does not wait for, and says so once', async () => {
  const calls: string[][] = [];
  const lines: string[] = [];
  const out = await runApt(['update'], {
    log: (l) => lines.push(l),
    deadline: Date.now() + 60_000,
    retryDelayMs: 0,
    run: async (args) => {
      calls.push(args);
      if (calls.length <= 2) throw LISTS_LOCKED('/var/lib/apt/lists/lock');
      return 'done';
    },
  });
  assert.equal(out, 'done');
  assert.equal(calls.length, 3);
  for (const args of calls) {
    assert.match(args.slice(0, 2).join(' '), TIMEOUT_OPTION);
    assert.equal(args.at(-1), 'update');
  }
  const waits = lines.filter((l) => l.startsWith('waiting for'));
  assert.deepEqual(waits.length, 1, lines.join('\n'));
  assert.match(waits[0]!, /apt-get \(pid 1187\) to release \/var\/lib\/apt\/lists\/lock .*up to \d+ min/);
});

test('runApt gives up at its deadline, and at once on any other failure', async () => {
  let calls = 0;
  const locked = () => {
    calls++;
    return Promise.reject(LISTS_LOCKED('/var/lib/apt/lists/lock'));
  };
  await assert.rejects(runApt(['update'], { log: () => undefined, deadline: Date.now() - 1, retryDelayMs: 0, run: locked }), /Could not get lock/);
  assert.equal(calls, 1);
  calls = 0;
  const broken = () => {
    calls++;
    return Promise.reject(new Error('apt-get install failed (100):\nE: Unable to locate package nope'));
  };
  await assert.rejects(runApt(['install', 'nope'], { log: () => undefined, deadline: Date.now() + 60_000, retryDelayMs: 0, run: broken }), /Unable to locate package/);
  assert.equal(calls, 1);
  // apt waited for dpkg's lock (its progress says so), got it, then failed otherwise: not a lock failure.
  calls = 0;
  const waitedThenBroke = () => {
    calls++;
    return Promise.reject(new Error('apt-get install failed (100):\nWaiting for cache lock: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 7 (unattended-upgr)...\nE: Unable to locate package nope'));
  };
  await assert.rejects(runApt(['install', 'nope'], { log: () => undefined, deadline: Date.now() + 60_000, retryDelayMs: 0, run: waitedThenBroke }), /Unable to locate package/);
  assert.equal(calls, 1);
});

// The real thing: root, apt-get and python3 (whose fcntl.lockf takes the same POSIX lock that apt and dpkg take).
const whyNotReal = (): string | false => {
  if (process.platform !== 'linux') return 'not Linux';
  if (process.getuid?.() !== 0) return 'not root: cannot take dpkg\'s lock';
  if (spawnSync('sh', ['-c', 'command -v apt-get'], { stdio: 'ignore' }).status !== 0) return 'no apt-get on this machine';
  if (spawnSync('python3', ['-c', 'import fcntl'], { stdio: 'ignore' }).status !== 0) return 'no python3 to hold the lock with';
  return false;
};
const skipReal = whyNotReal();

/** A child process holding an fcntl write lock on `path`, as apt and dpkg take it; resolves once it holds it. */
async function holdLock(path: string): Promise<ChildProcess> {
  const script = 'import fcntl, sys\nf = open(sys.argv[1], "a")\nfcntl.lockf(f, fcntl.LOCK_EX)\nsys.stdout.write("held\\n")\nsys.stdout.flush()\nsys.stdin.read()\n';
  const child = spawn('python3', ['-c', script, path], { stdio: ['pipe', 'pipe', 'inherit'] });
  // Read, never closed: a holder whose stdout breaks would die and drop the lock early.
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk) => {
      out += String(chunk);
      if (out.includes('held\n')) resolve(child);
    });
    child.once('exit', (code) => reject(new Error(`the lock holder exited (${code}): ${out}`)));
  });
}

const release = async (holder: ChildProcess) => {
  holder.stdin!.end();
  if (holder.exitCode === null) await once(holder, 'exit');
};

test('apt-get waits for dpkg\'s frontend lock held by another process, given the installer\'s option', { skip: skipReal, timeout: 180_000 }, async () => {
  const holder = await holdLock(DPKG_FRONTEND_LOCK);
  try {
    assert.equal(lockHolder(DPKG_FRONTEND_LOCK)?.pid, holder.pid);
    // Without a timeout apt fails at once: the lock is real and apt sees it.
    const refused = spawnSync('apt-get', aptGetArgs(['check'], 0), { encoding: 'utf8' });
    assert.equal(refused.status, 100, refused.stdout + refused.stderr);
    assert.match(refused.stderr, /Could not get lock \/var\/lib\/dpkg\/lock-frontend/);

    // `apt-get check` takes the frontend lock and changes nothing.
    const apt = spawn('apt-get', aptGetArgs(['check'], 120), { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    apt.stdout.on('data', (c) => (output += String(c)));
    apt.stderr.on('data', (c) => (output += String(c)));
    const exited = once(apt, 'exit');
    // It has reached the lock and is waiting on it: apt says so (no clock involved).
    const waiting = new Promise<void>((resolve, reject) => {
      const check = () => (/Waiting for cache lock: Could not get lock \/var\/lib\/dpkg\/lock-frontend/.test(output) ? resolve() : undefined);
      apt.stdout.on('data', check);
      apt.stderr.on('data', check);
      apt.once('exit', () => reject(new Error(`apt-get ended before waiting: ${output}`)));
    });
    await waiting;
    assert.equal(apt.exitCode, null, output);
    await release(holder);
    const [code] = await exited;
    assert.equal(code, 0, output);
  } finally {
    await release(holder);
  }
});

test('runApt runs `apt-get update` again while another holds its lists lock, until it is released', { skip: skipReal, timeout: 180_000 }, async () => {
  // apt-get update, but with lists, cache and sources of its own: no network, and the host's lists are left alone.
  const dir = mkdtempSync(join(tmpdir(), 'vessel-apt-'));
  const lists = join(dir, 'lists');
  for (const d of ['lists/partial', 'cache/archives/partial', 'sources']) mkdirSync(join(dir, d), { recursive: true });
  const args = ['-o', `Dir::State::Lists=${lists}`, '-o', `Dir::Cache=${join(dir, 'cache')}`, '-o', 'Dir::Etc::SourceList=/dev/null', '-o', `Dir::Etc::SourceParts=${join(dir, 'sources')}`, 'update'];
  const holder = await holdLock(join(lists, 'lock'));
  try {
    const lines: string[] = [];
    let released: Promise<void> | undefined;
    await runApt(args, {
      deadline: Date.now() + 120_000,
      retryDelayMs: 100,
      log: (line) => {
        lines.push(line);
        // apt-get has failed on the lock once and is to be run again: let the next run through.
        if (line.includes(join(lists, 'lock'))) released ??= release(holder);
      },
    });
    assert.ok(released !== undefined, `runApt said it waited: ${lines.join('\n')}`);
    const wait = lines.find((l) => l.includes(join(lists, 'lock')))!;
    assert.match(wait, new RegExp(`\\S+ \\(pid ${holder.pid}\\) to release`));
  } finally {
    await release(holder);
    rmSync(dir, { recursive: true, force: true });
  }
});

test('.ci/run\'s apt_get_waiting runs `apt-get update` again while another holds its lists lock', { skip: skipReal, timeout: 180_000 }, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-apt-'));
  const lists = join(dir, 'lists');
  for (const d of ['lists/partial', 'cache/archives/partial', 'sources']) mkdirSync(join(dir, d), { recursive: true });
  const args = ['-o', `Dir::State::Lists=${lists}`, '-o', `Dir::Cache=${join(dir, 'cache')}`, '-o', 'Dir::Etc::SourceList=/dev/null', '-o', `Dir::Etc::SourceParts=${join(dir, 'sources')}`, 'update'];
  const holder = await holdLock(join(lists, 'lock'));
  try {
    const bash = spawn('bash', ['-c', `set -euo pipefail\nAPT_LOCK_TIMEOUT_SECS=120\n${ciHelper()}\napt_get_waiting "$@"`, 'bash', ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let stderr = '';
    let released: Promise<void> | undefined;
    bash.stderr.on('data', (chunk) => {
      stderr += String(chunk);
      if (stderr.includes('Could not get lock') && stderr.includes('waiting for another apt')) released ??= release(holder);
    });
    const [code] = await once(bash, 'exit');
    assert.ok(released !== undefined, stderr);
    assert.equal(code, 0, stderr);
  } finally {
    await release(holder);
    rmSync(dir, { recursive: true, force: true });
  }
});
