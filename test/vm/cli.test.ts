/**
 * The compiled `vessel` CLI, run as a user runs it (a child process with its own home, logged in
 * with `vessel login`), against the real service with real VMs: create, ls, exec with its exit
 * code and exact bytes, cp of a file and of a directory both ways, checkpoint and fork, a secret
 * from stdin that shows up in no output or audit, audits, rm. Then `vessel shell` in a real
 * terminal: tmux, read with `capture-pane`; and with piped input, which the shell reads as its
 * stdin and whose end ends it, however fast it came: streamed (output before the input ends, the
 * shell's exit ending the CLI while stdin stays open), binary-safe, and Ctrl-C.
 *
 * Nothing waits on time: each step waits for what it expects (the CLI's exit, a marker on the
 * pane that only the command's output can contain, an audit in the list), within generous
 * overall limits.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, readlinkSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import { CLI, cliUser, type CliUser } from '../support/cli.js';
import { Service } from '../support/service.js';

const svc = new Service();
const TIMEOUT = { timeout: 300_000 };
const RT = 'cli-vm';
let user: CliUser;
let local: string;

before(async () => {
  await svc.start();
  user = cliUser();
  local = mkdtempSync(join(tmpdir(), 'vessel-cli-vm-'));
  const login = await user.run(['login', '--url', svc.url], { input: `${svc.token}\n` });
  assert.equal(login.status, 0, login.err);
}, { timeout: 900_000 });

after(async () => {
  await svc.destroy();
  rmSync(local, { recursive: true, force: true });
});

/** Runs the CLI and expects status 0. */
async function ok(args: string[], input?: string | Buffer) {
  const r = await user.run(args, input === undefined ? {} : { input });
  assert.equal(r.status, 0, `vessel ${args.join(' ')}: ${r.err}`);
  return r;
}

test('create, ls, get; exec streams exact bytes and exits with the command status', TIMEOUT, async () => {
  const created = JSON.parse((await ok(['runtime', 'create', RT, '--allow-host', 'example.com', '--json'])).out);
  assert.equal(created.status, 'running');
  assert.match((await ok(['runtime', 'ls'])).out, new RegExp(`^${RT}\\s+running\\s+1\\s+512 MiB\\s+1 host`, 'm'));
  assert.equal(JSON.parse((await ok(['runtime', 'get', RT, '--json'])).out).id, created.id);

  const three = await user.run(['exec', RT, '--', 'echo out; echo err >&2; exit 3']);
  assert.deepEqual([three.status, three.out, three.err], [3, 'out\n', 'err\n']);
  const bytes = await user.run(['exec', RT, '--', 'printf', '\\377\\000A\\n']);
  assert.equal(bytes.status, 0, bytes.err);
  assert.deepEqual([...bytes.stdout], [0xff, 0x00, 0x41, 0x0a]);
  const argv = await ok(['exec', RT, '--cwd', '/tmp', '-e', 'GREETING=hi there', '--', 'sh', '-c', 'echo "$GREETING from $(pwd)"']);
  assert.equal(argv.out, 'hi there from /tmp\n');
  const input = await ok(['exec', '-i', RT, '--', 'wc', '-c'], 'twelve bytes');
  assert.equal(input.out.trim(), '12');
  assert.equal((await user.run(['exec', RT, '--', 'no-such-program', 'x'])).status, 127);
  const timedOut = await user.run(['exec', RT, '--timeout', '1', '--', 'sleep 60']);
  assert.equal(timedOut.status, 124, timedOut.err);
});

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** Every entry below `dir`: its type, mode, and content or link target. */
function tree(dir: string, prefix = ''): Record<string, string> {
  const entries: Record<string, string> = {};
  for (const name of readdirSync(dir).sort()) {
    const path = join(dir, name);
    const st = lstatSync(path);
    const key = `${prefix}${name}`;
    if (st.isSymbolicLink()) entries[key] = `link ${readlinkSync(path)}`;
    else if (st.isDirectory()) Object.assign(entries, { [key]: 'dir' }, tree(path, `${key}/`));
    else entries[key] = `file ${(st.mode & 0o777).toString(8)} ${sha256(readFileSync(path))}`;
  }
  return entries;
}

test('cp: a file and a directory, into the runtime and back out', TIMEOUT, async () => {
  const data = randomBytes(3 * 1024 * 1024 + 5);
  writeFileSync(join(local, 'blob'), data);
  const up = JSON.parse((await ok(['cp', join(local, 'blob'), `${RT}:/root/`, '--json'])).out);
  assert.deepEqual(up, { source: join(local, 'blob'), destination: `${RT}:/root/blob`, type: 'file', bytes: data.length });
  assert.equal((await ok(['exec', RT, '--', 'sha256sum /root/blob | cut -d" " -f1'])).out.trim(), sha256(data));
  await ok(['cp', `${RT}:/root/blob`, join(local, 'blob.back')]);
  assert.equal(sha256(readFileSync(join(local, 'blob.back'))), sha256(data));

  const src = join(local, 'app');
  mkdirSync(join(src, 'lib/deep'), { recursive: true });
  writeFileSync(join(src, 'README'), 'read me\n');
  writeFileSync(join(src, 'lib/deep/data.bin'), data.subarray(0, 100_000));
  writeFileSync(join(src, 'run.sh'), '#!/bin/sh\necho ran\n');
  chmodSync(join(src, 'run.sh'), 0o755);
  symlinkSync('README', join(src, 'link'));
  // /srv/app does not exist: the directory becomes it.
  const dirUp = JSON.parse((await ok(['cp', src, `${RT}:/srv/app`, '--json'])).out);
  assert.equal(dirUp.type, 'directory');
  assert.equal((await ok(['exec', RT, '--', '/srv/app/run.sh'])).out, 'ran\n');
  assert.equal((await ok(['exec', RT, '--', 'readlink /srv/app/link; cat /srv/app/lib/deep/data.bin | wc -c'])).out, 'README\n100000\n');
  // Onto an existing directory, it goes inside it.
  await ok(['cp', src, `${RT}:/srv/app`]);
  assert.equal((await ok(['exec', RT, '--', 'cat /srv/app/app/README'])).out, 'read me\n');

  const back = join(local, 'back');
  await ok(['cp', `${RT}:/srv/app/.`, back]);
  assert.deepEqual(tree(back), { ...tree(src), app: 'dir', ...Object.fromEntries(Object.entries(tree(src)).map(([k, v]) => [`app/${k}`, v])) });
  const inside = join(local, 'inside');
  mkdirSync(inside);
  await ok(['cp', `${RT}:/srv/app/lib`, inside]);
  assert.deepEqual(tree(join(inside, 'lib')), tree(join(src, 'lib')));
});

test('checkpoint and fork: the fork has what the runtime had at the capture', TIMEOUT, async () => {
  await ok(['exec', RT, '--', 'echo before-checkpoint > /root/marker']);
  const snap = JSON.parse((await ok(['checkpoint', 'create', RT, '--name', 'cli-snap', '--json'])).out);
  assert.equal(snap.state, 'ready');
  await ok(['exec', RT, '--', 'echo after > /root/marker']);
  assert.match((await ok(['checkpoint', 'ls'])).out, /^cli-snap\s+ready\s/m);
  const fork = JSON.parse((await ok(['fork', 'cli-snap', 'cli-fork', '--json'])).out);
  assert.equal(fork.status, 'running');
  assert.equal((await ok(['exec', 'cli-fork', '--', 'cat /root/marker'])).out, 'before-checkpoint\n');
  await ok(['runtime', 'rm', 'cli-fork']);
  await ok(['checkpoint', 'rm', 'cli-snap']);
});

test('a secret from stdin, a rule, audits: the value is in no output and no audit', TIMEOUT, async () => {
  const value = `sk-cli-${randomBytes(12).toString('hex')}`;
  const outputs = [await ok(['secret', 'create', 'cli-key'], `${value}\n`)];
  outputs.push(await ok(['rule', 'create', RT, '--secret', 'cli-key', '--host', 'api.example.com', '--header', 'x-api-key']));
  outputs.push(await ok(['secret', 'ls', '--json']), await ok(['rule', 'ls', '--json']), await ok(['secret', 'get', 'cli-key']));

  const denied = await ok(['exec', RT, '--', "curl -sS -m 10 -o /dev/null -w '%{http_code}' -H 'x-probe: 1' http://203.0.113.7/cli-denied"]);
  assert.equal(denied.out, '403');
  // Audits are written in batches (every 250 ms): ask until this one is in.
  let audits: { payload: { egress: { http_request?: { path?: string; action?: string } } } }[] = [];
  const deadline = Date.now() + 120_000;
  while (!audits.some((a) => a.payload.egress.http_request?.path === '/cli-denied')) {
    assert.ok(Date.now() < deadline, 'the denied request was audited');
    const r = await ok(['audit', 'ls', '--runtime', RT, '--json']);
    outputs.push(r);
    audits = JSON.parse(r.out);
  }
  assert.equal(audits.find((a) => a.payload.egress.http_request?.path === '/cli-denied')!.payload.egress.http_request!.action, 'deny');
  const table = await ok(['audit', 'ls', '--runtime', RT]);
  assert.match(table.out, new RegExp(`${RT}\\s+http_request\\s+deny\\s+GET 203.0.113.7/cli-denied -> 403\\s+no_host`));
  outputs.push(table, await ok(['audit', 'tail', '-n', '5']));

  for (const r of outputs) assert.ok(!r.out.includes(value) && !r.err.includes(value), 'the value is printed nowhere');
  const rule = JSON.parse((await ok(['rule', 'ls', RT, '--json'])).out)[0];
  await ok(['rule', 'rm', rule.id]);
  await ok(['secret', 'rm', 'cli-key']);
});

/** One tmux server of the test's own (its socket and config), run as the CLI's user. */
class Tmux {
  readonly socket = `vessel-cli-${process.pid}`;
  readonly conf: string;

  constructor(readonly env: Record<string, string>) {
    this.conf = join(local, 'tmux.conf');
    // The pane stays after its program exits, so its last screen can be read; no status line, so the pane is the whole window.
    writeFileSync(this.conf, 'set -g remain-on-exit on\nset -g status off\n');
  }

  run(...args: string[]): string {
    const r = spawnSync('tmux', ['-L', this.socket, '-f', this.conf, ...args], { env: this.env, encoding: 'utf8' });
    assert.equal(r.status, 0, `tmux ${args.join(' ')}: ${r.stderr}`);
    return r.stdout;
  }

  /** The pane's text, its scrollback included, wrapped lines joined. */
  screen(): string {
    return this.run('capture-pane', '-p', '-J', '-S', '-', '-t', 'cli');
  }

  keys(...keys: string[]): void {
    this.run('send-keys', '-t', 'cli', ...keys);
  }

  /** Polls the pane until `re` matches it; the overall limit is generous, for a loaded CI host. */
  async waitFor(re: RegExp, timeoutMs = 120_000): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const match = this.screen().match(re);
      if (match !== null) return match;
      if (Date.now() > deadline) assert.fail(`${re} did not appear on the pane:\n${this.screen()}`);
      await delay(50);
    }
  }

  kill(): void {
    spawnSync('tmux', ['-L', this.socket, 'kill-server'], { env: this.env });
  }
}

test('vessel shell in tmux: size and resize, Ctrl-C, exit 3, the terminal restored', { ...TIMEOUT, skip: spawnSync('tmux', ['-V']).status === 0 ? false : 'tmux is not installed (.ci/run installs it)' }, async () => {
  const tmux = new Tmux({ ...user.env, TERM: 'xterm-256color' });
  try {
    // After the CLI, the same terminal's settings: raw mode must be gone (icanon and echo back on).
    const script = '"$0" "$1" shell "$2"; s=$?; printf "after: %s\\n" "$(stty -a | tr " ;" "\\n\\n" | grep -x -e icanon -e echo | tr "\\n" " ")exit $s"';
    tmux.run('new-session', '-d', '-s', 'cli', '-x', '120', '-y', '40', 'sh', '-c', script, process.execPath, CLI, RT);
    // $((…)) is expanded by the remote shell: the result appears only in its output, never in the echoed keys.
    tmux.keys('echo "ready $((6*7))"', 'Enter');
    await tmux.waitFor(/^ready 42$/m);
    tmux.keys('echo "size $(stty size) mark$((1+1))"', 'Enter');
    await tmux.waitFor(/^size 40 120 mark2$/m);

    tmux.run('resize-window', '-t', 'cli', '-x', '100', '-y', '30');
    // The resize reaches the CLI as SIGWINCH and the guest as a message, while the keys take
    // another path: ask again until the new size shows, each answer told apart by its mark.
    let size = '';
    for (let i = 0; size !== '30 100'; i++) {
      assert.ok(i < 50, `the size never became 30 100 (last ${size})`);
      tmux.keys(`echo "size $(stty size) mark$((${100 + i}+1))"`, 'Enter');
      // Not anchored at the line's end: a shell redrawing its line for the new width can leave
      // the old line's tail on the screen after the answer (tmux showed `mark101 "size $(stty…`).
      size = (await tmux.waitFor(new RegExp(`^size (\\d+ \\d+) mark${101 + i}(?!\\d)`, 'm')))[1]!;
    }

    tmux.keys('echo "started $((2*3))"; sleep 1000', 'Enter');
    await tmux.waitFor(/^started 6$/m);
    tmux.keys('C-c');
    tmux.keys('echo "status $? mark$((3*3))"', 'Enter');
    await tmux.waitFor(/^status 130 mark9$/m);

    tmux.keys('exit 3', 'Enter');
    const after = await tmux.waitFor(/^after: (.*)exit (\d+)$/m);
    assert.equal(after[2], '3', "the CLI's status is the shell's");
    assert.deepEqual(after[1]!.trim().split(' ').sort(), ['echo', 'icanon']);
  } finally {
    tmux.kill();
  }
});

/** What a piped `vessel shell` prints and how it ends: each input is one write, faster than the shell reads it. */
const PIPED_SHELLS: { name: string; input: string; out: string; status: number }[] = [
  { name: 'one command, then the end of input', input: 'echo "eof-$((2+2))"\n', out: 'eof-4\n', status: 0 },
  { name: 'several commands, the last an exit', input: 'echo "a-$((1+1))"\ncd /tmp\necho "b-$(pwd)"\nexit 4\necho never\n', out: 'a-2\nb-/tmp\n', status: 4 },
  { name: 'no newline after the last command', input: 'echo one\necho "two-$((1+1))"', out: 'one\ntwo-2\n', status: 0 },
  { name: 'a command that reads the input too', input: 'read line\nfrom-stdin\necho "line=$line"; false\n', out: 'line=from-stdin\n', status: 1 },
  { name: 'a command still running when the input ends', input: 'sleep 2; echo "late-$((3*3))"\n', out: 'late-9\n', status: 0 },
];

test('vessel shell with piped input: the commands run in order, and the end of input ends the shell', { timeout: 180_000 }, async () => {
  for (const c of PIPED_SHELLS) {
    const r = await user.run(['shell', RT], { input: c.input });
    assert.deepEqual([r.status, r.out], [c.status, c.out], `${c.name}: ${r.err}`);
  }
});

test('piped vessel shell streams: output before the input ends, and the shell exiting while stdin stays open ends the CLI', { timeout: 180_000 }, async () => {
  const cli = user.start(['shell', RT]);
  try {
    cli.child.stdin.write('echo "first-$((2+3))"\n');
    // The input is still open: this output can only come from a shell that already runs it.
    await cli.waitForOut(/^first-5$/m);
    cli.child.stdin.write('echo "second-$((3+4))" >&2; exit 3\n');
    // stdin is never ended: the shell's exit alone ends the CLI.
    const r = await cli.result;
    assert.deepEqual([r.status, r.out, r.err], [3, 'first-5\n', 'second-7\n']);
  } finally {
    cli.child.stdin.destroy();
    cli.child.kill('SIGKILL');
  }
});

test('piped vessel shell is binary-safe: a command line, then 100 KB of random bytes for it to read', { timeout: 180_000 }, async () => {
  const data = randomBytes(100_000);
  const r = await user.run(['shell', RT], { input: Buffer.concat([Buffer.from('exec cat > /tmp/blob\n'), data]) });
  assert.deepEqual([r.status, r.out], [0, ''], r.err);
  const sum = await ok(['exec', RT, '--', 'sha256sum /tmp/blob; wc -c < /tmp/blob']);
  assert.equal(sum.out, `${sha256(data)}  /tmp/blob\n100000\n`);
});

test('piped vessel shell: Ctrl-C (SIGINT) interrupts the remote command, whose shell then ends with 130', { timeout: 180_000 }, async () => {
  const cli = user.start(['shell', RT]);
  try {
    cli.child.stdin.write('echo "started-$((4*4))"; sleep 1000; echo never\n');
    await cli.waitForOut(/^started-16$/m);
    cli.child.kill('SIGINT');
    const r = await cli.result;
    assert.deepEqual([r.status, r.out], [130, 'started-16\n'], r.err);
  } finally {
    cli.child.stdin.destroy();
    cli.child.kill('SIGKILL');
  }
});

test('rm deletes the runtime', TIMEOUT, async () => {
  assert.deepEqual(JSON.parse((await ok(['runtime', 'rm', RT, '--json'])).out), { deleted: [RT] });
  assert.equal((await user.run(['runtime', 'get', RT])).status, 3);
  assert.equal(statSync(join(user.home, '.config/vessel/config.json')).mode & 0o777, 0o600);
});
