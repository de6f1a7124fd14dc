/**
 * vessel-agent's processes, run on the host behind a QEMU-like relay: buffered exec (the core's
 * collector over the driver's process code) with exact bytes, caps, exit codes and the deadline;
 * streaming as produced, stdin, signals and tree kill, a PTY (size, resize, Ctrl-C), and
 * background output kept in rings: replayed from an offset to a new client connection, and
 * "out of range" once the ring has dropped it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomInt } from 'node:crypto';
import { AgentClient, AgentError, type AgentProcess } from '../../src/vm/agent/agent-client.js';
import { runBuffered } from '../../src/core/commands.js';
import { VesselError } from '../../src/core/errors.js';
import type { ExecRequest } from '../../src/core/types.js';
import { HostAgentDriver } from '../support/host-agent-driver.js';
import { buildAgent, eventually, pidsRunning, sleep } from '../support/agent-harness.js';
import { agentFixture } from '../support/agent-fixture.js';

const build = buildAgent();
const skip = 'skip' in build ? build.skip : false;
const ENV = ['PATH=/usr/local/bin:/usr/bin:/bin', 'LANG=C'];
const fx = agentFixture('exec', build);
/** A buffered exec through the core's one exec path, the driver's process code and the real agent. */
const guest = new HostAgentDriver(() => fx.client).guest('host');
const exec = (req: Partial<ExecRequest> & { command: string }) =>
  runBuffered(guest, { args: [], cwd: null, env: {}, user: null, stdin: null, maxOutputBytes: 1 << 20, timeoutSecs: 30, ...req });

async function collect(proc: AgentProcess): Promise<{ stdout: string; stderr: string }> {
  const out = { stdout: '', stderr: '' };
  for await (const c of proc) out[c.channel] += c.data.toString('latin1');
  return out;
}

test('the agent builds without warnings', { skip }, () => {
  assert.equal((build as { warnings: string }).warnings, '');
});

test('buffered exec: exit code, stdout through stdin, stderr decoded as lossy UTF-8', { skip }, async () => {
  const input = randomBytes(200_000).toString('base64');
  const r = await exec({ command: "cat; printf '\\000\\377\\001' >&2; exit 7", stdin: input });
  assert.equal(r.exit_code, 7);
  assert.ok(r.stdout === input, 'stdout is stdin, byte for byte');
  assert.equal(r.stderr, '\u0000\ufffd\u0001', 'an invalid byte becomes U+FFFD');
  assert.equal(r.stdout_truncated || r.stderr_truncated, false);
  assert.ok(r.duration_ms >= 0);
});

test('buffered exec: argv found on PATH, env, cwd; truncation is honest; a signal is 128 + n', { skip }, async () => {
  const r = await exec({ command: 'sh', args: ['-c', 'echo "$FOO"; pwd'], env: { FOO: 'bar baz' }, cwd: fx.dir });
  assert.equal(r.stdout, `bar baz\n${fx.dir}\n`);
  const big = await exec({ command: 'head', args: ['-c', '300000', '/dev/zero'], maxOutputBytes: 1000 });
  assert.equal(big.exit_code, 0);
  assert.equal(big.stdout.length, 1000);
  assert.equal(big.stdout_truncated, true);
  assert.equal(big.stderr_truncated, false);
  assert.equal((await exec({ command: 'kill -TERM $$' })).exit_code, 128 + 15);
});

test('a command that cannot start is command_failed: no executable, no working directory', { skip }, async () => {
  const failed = (why: RegExp) => (e: unknown) => e instanceof VesselError && e.code === 'command_failed' && why.test(e.message);
  await assert.rejects(exec({ command: '/no/such/program', args: ['x'] }), failed(/^cannot start '\/no\/such\/program': executable was not found/));
  await assert.rejects(exec({ command: 'true', cwd: '/no/such/fx.dir' }), failed(/^cannot start command: working directory '\/no\/such\/fx.dir' does not exist$/));
  await assert.rejects(exec({ command: 'no-such-program-on-path', args: ['x'] }), failed(/^cannot start 'no-such-program-on-path'/));
});

test("a command as a user: the agent takes the ids /etc/passwd and /etc/group give, before the cwd, with the user's HOME", { skip }, async () => {
  // The agent runs on this host here, so the accounts are the host's: Debian's nobody and nogroup.
  const ids = "id -u; id -g; id -G; echo \"$HOME\"";
  assert.equal((await exec({ command: ids, user: 'nobody' })).stdout, '65534\n65534\n65534\n/nonexistent\n');
  assert.equal((await exec({ command: ids, user: '1234:4321' })).stdout, '1234\n4321\n4321\n/\n', 'ids without entries are taken as they are, with no other groups');
  assert.equal((await exec({ command: ids, user: 'nobody', env: { HOME: '/tmp' } })).stdout, '65534\n65534\n65534\n/tmp\n', "the request's HOME wins");
  assert.equal((await exec({ command: 'id -u', user: 'root' })).stdout, '0\n');
  const failed = (why: RegExp) => (e: unknown) => e instanceof VesselError && e.code === 'command_failed' && why.test(e.message);
  await assert.rejects(exec({ command: 'true', user: 'ghost' }), failed(/^cannot start command: unable to find user ghost/));
  await assert.rejects(exec({ command: 'true', user: 'nobody:ghosts' }), failed(/unable to find group ghosts/));
  // /root is root's alone (0700): the user enters the directory as itself, as Docker's USER does.
  await assert.rejects(exec({ command: 'true', user: 'nobody', cwd: '/root' }), failed(/working directory '\/root' cannot be entered/));
});

test('SPAWN_AS_USER: a user with too many groups is refused before it is sent', { skip }, () => {
  assert.throws(() => fx.client.spawn({ argv: ['true'], user: { uid: 1, gid: 1, groups: Array.from({ length: 257 }, (_, i) => i) } }), /at most 256 supplementary groups/);
  assert.throws(() => fx.client.spawn({ argv: ['true'], user: { uid: -1, gid: 1, groups: [] } }), /not a user or group id/);
});

test('streaming: the first chunk arrives before the command ends', { skip }, async () => {
  const started = Date.now();
  const proc = fx.client.spawn({ argv: ['sh', '-c', 'echo a; sleep 1; echo b'], env: ENV });
  const seen: Array<{ text: string; at: number }> = [];
  for await (const c of proc) seen.push({ text: c.data.toString(), at: Date.now() - started });
  const info = await proc.done;
  assert.equal(seen.map((s) => s.text).join(''), 'a\nb\n');
  assert.ok(seen[0]!.text === 'a\n' && seen[0]!.at < 800, `first chunk at ${seen[0]!.at} ms`);
  assert.ok(seen.at(-1)!.at >= 900, 'the last chunk comes after the sleep');
  assert.equal(info?.state, 'exited');
  assert.equal(info?.code, 0);
});

test('stdin streamed in pieces, closed with end()', { skip }, async () => {
  const proc = fx.client.spawn({ argv: ['sh', '-c', 'while read l; do echo "got $l"; done; echo eof'], env: ENV, stdin: true });
  const output = collect(proc);
  await proc.write(Buffer.from('one\n'));
  await sleep(50);
  await proc.write(Buffer.from('two\nthr'));
  await proc.write(Buffer.from('ee\n'));
  proc.end();
  assert.equal((await output).stdout, 'got one\ngot two\ngot three\neof\n');
});

test('signals: SIGTERM ends a process, and the exit says so', { skip }, async () => {
  const proc = fx.client.spawn({ argv: ['sleep', '100'], env: ENV });
  const info = await proc.info;
  await fx.client.signal(info.id, 'SIGTERM');
  const done = await proc.done;
  assert.equal(done?.state, 'signaled');
  assert.equal(done?.code, 15);
});

test('a timeout kills the whole tree, including a child that left the process group, and is deadline_exceeded', { skip }, async () => {
  const n = String(100000 + randomInt(800000));
  await assert.rejects(
    exec({ command: `sleep ${n} & setsid sleep ${n} & sleep ${n}; wait`, timeoutSecs: 1 }),
    (e: unknown) => e instanceof VesselError && e.code === 'deadline_exceeded' && e.message === 'command did not finish within 1 s and was killed',
  );
  await eventually(() => (pidsRunning(['sleep', n]).length === 0 ? true : undefined), 3000, 'every sleep to be gone');
});

test('PTY: the size is the one asked for, resize is visible to stty', { skip }, async () => {
  const sized = await collect(fx.client.spawn({ argv: ['stty', 'size'], env: ENV, pty: { rows: 30, cols: 100 } }));
  assert.equal(sized.stdout, '30 100\r\n');
  const proc = fx.client.spawn({ argv: ['sh', '-c', 'read x; stty size'], env: ENV, pty: { rows: 24, cols: 80 } });
  const output = collect(proc);
  const { id } = await proc.info;
  await fx.client.resize(id, 50, 120);
  await proc.write(Buffer.from('\n'));
  assert.match((await output).stdout, /50 120\r\n$/);
});

test('PTY: Ctrl-C (0x03) interrupts the foreground command of a shell, not the shell', { skip }, async () => {
  const proc = fx.client.spawn({ argv: ['sh', '-i'], env: [...ENV, 'PS1=$ '], pty: { rows: 24, cols: 80 } });
  let text = '';
  const reader = (async () => {
    for await (const c of proc) text += c.data.toString();
  })();
  await eventually(() => (text.includes('$ ') ? true : undefined), 5000, 'the prompt');
  await proc.write(Buffer.from('sleep 100\n'));
  await sleep(300);
  await proc.write(Buffer.from([0x03]));
  await proc.write(Buffer.from('echo rc=$?\n'));
  await eventually(() => (text.includes('rc=130') ? true : undefined), 5000, `rc=130 in ${JSON.stringify(text)}`);
  await proc.write(Buffer.from('exit 3\n'));
  await reader;
  const done = await proc.done;
  assert.equal(done?.state, 'exited');
  assert.equal(done?.code, 3);
});

test('background output is replayed from an offset to a new connection', { skip }, async () => {
  const proc = fx.client.spawn({ argv: ['sh', '-c', 'for i in 1 2 3 4 5; do echo line$i; done; sleep 100'], env: ENV });
  const { id } = await proc.info;
  let seen = '';
  for await (const c of proc) {
    seen += c.data.toString();
    if (seen.endsWith('line5\n')) break;
  }
  // The service goes away mid-stream and a new one connects: the channel holds stale bytes.
  fx.agent.dropClient();
  await eventually(() => (fx.client.closed ? true : undefined), 2000, 'the old fx.client to see the close');
  fx.client = await AgentClient.connect(fx.agent.path);
  const listed = (await fx.client.listProcesses()).find((p) => p.id === id);
  assert.equal(listed?.state, 'running');
  assert.deepEqual(listed?.stdout, { start: 0n, end: 30n });
  assert.match(listed!.command, /^sh -c for i in/);

  const replay = fx.client.attach(id, { from: { stdout: 6n, stderr: 0n } });
  const chunks: Array<{ offset: bigint; text: string }> = [];
  for await (const c of replay) chunks.push({ offset: c.offset, text: c.data.toString() });
  assert.equal(chunks.map((c) => c.text).join(''), 'line2\nline3\nline4\nline5\n');
  assert.equal(chunks[0]!.offset, 6n);
  assert.equal(await replay.done, null, 'without follow the stream ends at what exists now');
  assert.equal(replay.next.stdout, 30n);

  // Follow from the end, then kill: the stream ends with the exit.
  const live = fx.client.attach(id, { from: 'end', follow: true });
  await live.info;
  await fx.client.signal(id, 'SIGKILL', { tree: true });
  const done = await live.done;
  assert.equal(done?.state, 'signaled');
  await fx.client.forget(id);
  assert.equal((await fx.client.listProcesses()).some((p) => p.id === id), false);
});

test('a ring that overflowed answers out of range, and keeps its newest bytes', { skip }, async () => {
  const proc = fx.client.spawn({ argv: ['sh', '-c', 'head -c 100000 /dev/zero | tr "\\0" a; printf END'], env: ENV, ringBytes: 4096, window: 4096 });
  const { id } = await proc.info;
  // Nobody reads for a while: the process never waits for us, the ring drops its oldest bytes.
  const info = await eventually(async () => (await fx.client.listProcesses()).find((p) => p.id === id && p.state === 'exited'), 5000, 'the exit');
  assert.deepEqual(info.stdout, { start: 100003n - 4096n, end: 100003n });
  let received = 0n;
  let lost = 0n;
  for await (const c of proc) {
    received += BigInt(c.data.length);
    lost += c.lost;
  }
  assert.equal(received + lost, 100003n, 'every byte is either received or counted as lost');
  assert.ok(lost > 0n);

  const gone = fx.client.attach(id, { from: { stdout: 0n, stderr: 0n } });
  await assert.rejects(
    (async () => {
      for await (const _ of gone) void _;
    })(),
    (e: unknown) => e instanceof AgentError && e.kind === 'OUT_OF_RANGE',
  );
  const kept = await collect(fx.client.attach(id, { from: 'oldest' }));
  assert.equal(kept.stdout.length, 4096);
  assert.ok(kept.stdout.endsWith('aaaEND'));
  await fx.client.forget(id);
});

test('the agent keeps many processes and lists them', { skip }, async () => {
  const results = await Promise.all(Array.from({ length: 20 }, (_, i) => exec({ command: `echo ${i}` })));
  assert.deepEqual(
    results.map((r) => r.stdout),
    Array.from({ length: 20 }, (_, i) => `${i}\n`),
  );
  // A buffered exec asks the agent to forget a process once its exit is delivered.
  assert.equal((await fx.client.listProcesses()).filter((p) => /^\/bin\/sh -c echo \d+$/.test(p.command)).length, 0);
});
