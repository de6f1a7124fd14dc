/**
 * vessel-agent's channel, on the host: garbage from the host side makes it report and resync
 * without losing its processes; a request cut short by a disconnection is never acted on; stale
 * output is skipped by the next client; an idle agent does not wake up and stays small; a lost
 * host (Unix socket channel) costs no CPU while it is away and its output waits for it. The fork
 * identity and shutdown run in a test build whose system calls are log lines (the host's clock,
 * hostname and power are left alone); on a real VM they are for the VM tests.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createConnection, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AgentClient, AgentError, AgentProtocolError } from '../../src/vm/agent/agent-client.js';
import { encodeFrame, RESYNC_FILL_BYTES, SYNC_MAGIC, T } from '../../src/vm/agent/frames.js';
import { encodeSpawn } from '../../src/vm/agent/messages.js';
import { buildAgent, childrenOf, cpuTicks, eventually, privateBytes, RelayedAgent, sleep, wakeups } from '../support/agent-harness.js';

const build = buildAgent();
const stubs = buildAgent({ testStubs: true });
const skip = 'skip' in build ? build.skip : false;
const ENV = ['PATH=/usr/local/bin:/usr/bin:/bin'];
const MIB = 1024 * 1024;
let dir = '';
let agent: RelayedAgent;

before(async () => {
  if (skip) return;
  dir = mkdtempSync(join(tmpdir(), 'vessel-agent-channel-'));
  agent = await RelayedAgent.start((build as { binary: string }).binary, dir);
});

after(async () => {
  if (skip) return;
  await agent.stop();
  rmSync(dir, { recursive: true, force: true });
});

test('garbage from the host: the agent reports it, resyncs, and keeps its processes', { skip }, async () => {
  let client = await AgentClient.connect(agent.path);
  const { id } = await client.spawn({ argv: ['sleep', '100'], env: ENV }).info;
  const garbage = [
    randomBytes(5000),
    Buffer.from([0x56, T.PING, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]), // a length no frame has
    Buffer.concat([encodeFrame(T.PING, 1).subarray(0, 12), Buffer.from([0x00])]), // a wrong end byte
  ];
  for (const bytes of garbage) {
    const closed = new Promise<Error>((resolve) => client.onClose(resolve));
    agent.writeRaw(bytes);
    const err = await closed;
    assert.ok(err instanceof AgentProtocolError && /reports a protocol error/.test(err.message), String(err));
    client = await AgentClient.connect(agent.path);
    await client.ping();
  }
  assert.ok(agent.alive);
  assert.equal((await client.listProcesses()).find((p) => p.id === id)?.state, 'running');
  await client.signal(id, 'SIGKILL');
  client.close();
});

test('a request cut short by a disconnection is never acted on', { skip }, async () => {
  // cut 0 is the control: the whole frame arrives and runs.
  for (const cut of [0, 1, 2, 30]) {
    const marker = join(dir, `marker-${cut}`);
    const spawnFrame = encodeFrame(T.SPAWN, 1, encodeSpawn({ argv: ['touch', marker], env: ENV, window: 4096 }));
    const raw = createConnection(agent.path);
    await new Promise((resolve) => raw.once('connect', resolve));
    // A host that synced, sent all of a SPAWN but its last `cut` bytes, and died.
    raw.write(Buffer.concat([Buffer.alloc(RESYNC_FILL_BYTES, 0xff), SYNC_MAGIC, encodeFrame(T.HELLO, 0, Buffer.alloc(20)), spawnFrame.subarray(0, spawnFrame.length - cut)]));
    await sleep(100);
    raw.destroy();
    const client = await AgentClient.connect(agent.path);
    await client.ping();
    await sleep(200);
    assert.equal(existsSync(marker), cut === 0, cut === 0 ? 'the whole SPAWN ran' : `a SPAWN missing its last ${cut} bytes ran`);
    client.close();
  }
});

test('output stale in the channel is skipped by the next client', { skip }, async () => {
  const client = await AgentClient.connect(agent.path);
  const proc = client.spawn({ argv: ['head', '-c', String(64 * MIB), '/dev/zero'], env: ENV, window: 8 * MIB });
  const { id } = await proc.info;
  let got = 0;
  for await (const c of proc) {
    got += c.data.length;
    if (got > MIB) break; // stop reading: the agent keeps writing into the socket
  }
  agent.dropClient();
  const next = await AgentClient.connect(agent.path);
  await next.ping();
  assert.ok((await next.listProcesses()).some((p) => p.id === id));
  await next.signal(id, 'SIGKILL', { tree: true });
  next.close();
});

test('an idle agent does not wake up and holds less than 1 MiB of its own memory', { skip }, async () => {
  const client = await AgentClient.connect(agent.path);
  const proc = client.spawn({ argv: ['true'], env: ENV, hold: true, forgetOnExit: true });
  for await (const _ of proc);
  await proc.done;
  await sleep(200);
  const before = wakeups(agent.pid);
  await sleep(1500);
  assert.equal(wakeups(agent.pid) - before, 0, 'an idle, connected agent slept the whole time');
  const mem = privateBytes(agent.pid);
  assert.ok(mem < MIB, `private memory ${mem} bytes`);
  client.close();
});

test('a lost host costs no CPU, and the output waits for it', { skip }, async (t) => {
  const path = join(dir, 'host.sock');
  const connections: Socket[] = [];
  let server = createServer((s) => connections.push(s));
  await new Promise<void>((resolve) => server.listen(path, resolve));
  const child = spawn((build as { binary: string }).binary, ['--channel', path], { stdio: ['ignore', 'ignore', 'ignore'] });
  t.after(() => {
    for (const pid of childrenOf(child.pid!)) process.kill(-pid, 'SIGKILL');
    child.kill('SIGKILL');
    server.close();
  });
  const first = await eventually(() => connections[0], 5000, 'the agent to connect');
  const client = await AgentClient.over(first);
  const proc = client.spawn({ argv: ['sh', '-c', 'for i in 1 2 3 4 5; do echo $i; done; sleep 100'], env: ENV });
  const { id } = await proc.info;
  client.close(); // the host goes away, and stays away: nothing listens any more
  await new Promise<void>((resolve) => server.close(() => resolve()));

  await sleep(300);
  const ticks = cpuTicks(child.pid!);
  const woke = wakeups(child.pid!);
  await sleep(2000);
  const spent = cpuTicks(child.pid!) - ticks;
  const wakes = wakeups(child.pid!) - woke;
  t.diagnostic(`disconnected for 2 s: ${spent} clock ticks, ${wakes} wake-ups`);
  assert.ok(spent <= 2, `${spent} ticks of CPU while disconnected`);
  assert.ok(wakes <= 8, `${wakes} wake-ups while disconnected (backoff doubling to 5 s)`);

  server = createServer((s) => connections.push(s));
  await new Promise<void>((resolve) => server.listen(path, resolve));
  const second = await eventually(() => connections[1], 8000, 'the agent to reconnect');
  const again = await AgentClient.over(second);
  let text = '';
  for await (const c of again.attach(id, { from: 'oldest' })) text += c.data.toString();
  assert.equal(text, '1\n2\n3\n4\n5\n');
  await again.signal(id, 'SIGKILL', { tree: true });
  again.close();
});

test('identity: entropy first, then clock, then hostname and an atomic hosts file (stubbed calls)', { skip: skip || ('skip' in stubs ? stubs.skip : false) }, async (t) => {
  const stubDir = mkdtempSync(join(dir, 'stub-'));
  const fake = await RelayedAgent.start((stubs as { binary: string }).binary, dir, { VESSEL_AGENT_STUB_DIR: stubDir });
  t.after(() => fake.stop());
  const client = await AgentClient.connect(fake.path);
  const entropy = randomBytes(64);
  await client.setIdentity({ entropy, clockNs: 1_700_000_000_123_456_789n, hostname: 'fork-1' });
  assert.deepEqual(readFileSync(join(stubDir, 'calls.log'), 'utf8').trim().split('\n'), [
    `reseed 64 ${entropy.toString('hex')}`,
    'clock 1700000000123456789',
    'hostname fork-1',
  ]);
  assert.equal(readFileSync(join(stubDir, 'hosts'), 'utf8'), '127.0.0.1 localhost\n127.0.1.1 fork-1\n::1 localhost ip6-localhost ip6-loopback\n');
  assert.equal(existsSync(join(stubDir, 'hosts.tmp')), false);

  // After a pause: the clock alone (with fresh entropy), no hostname.
  await client.setIdentity({ entropy: Buffer.from([1]), clockNs: 5n });
  assert.deepEqual(readFileSync(join(stubDir, 'calls.log'), 'utf8').trim().split('\n').slice(3), ['reseed 1 01', 'clock 5']);

  const bad = (e: unknown) => e instanceof AgentError && e.kind === 'BAD_REQUEST';
  await assert.rejects(client.setIdentity({ entropy: Buffer.alloc(0), hostname: 'x' }), bad);
  await assert.rejects(client.setIdentity({ entropy: Buffer.alloc(257) }), bad);
  await assert.rejects(client.setIdentity({ entropy: Buffer.alloc(8), hostname: 'bad name' }), bad);
  await assert.rejects(client.setIdentity({ entropy: Buffer.alloc(8), hostname: 'x'.repeat(65) }), bad);
  await assert.rejects(client.setIdentity({ entropy: Buffer.alloc(8), clockNs: 2n ** 63n }), bad);
  assert.equal(readFileSync(join(stubDir, 'calls.log'), 'utf8').trim().split('\n').length, 5, 'a refused request changes nothing');

  // The agent answers first and powers off after (a real power-off ends the channel): wait for the call.
  const lastCall = (expected: string) => eventually(() => (readFileSync(join(stubDir, 'calls.log'), 'utf8').endsWith(`${expected}\n`) ? true : undefined), 5000, expected);
  await client.shutdown();
  await lastCall('power off');
  await client.shutdown({ reboot: true });
  await lastCall('power reboot');
  client.close();
});

test('identity: the first step that fails stops the rest and is named', { skip: skip || ('skip' in stubs ? stubs.skip : false) }, async (t) => {
  const stubDir = mkdtempSync(join(dir, 'stub-'));
  const fake = await RelayedAgent.start((stubs as { binary: string }).binary, dir, { VESSEL_AGENT_STUB_DIR: stubDir, VESSEL_AGENT_STUB_FAIL: 'clock' });
  t.after(() => fake.stop());
  const client = await AgentClient.connect(fake.path);
  await assert.rejects(client.setIdentity({ entropy: randomBytes(8), clockNs: 10n, hostname: 'never' }), (e: unknown) => e instanceof AgentError && e.kind === 'ERRNO' && e.errno === 1 && /clock_settime/.test(e.detail));
  const calls = readFileSync(join(stubDir, 'calls.log'), 'utf8');
  assert.match(calls, /^reseed 8 [0-9a-f]{16}\nclock 10\n$/);
  assert.equal(existsSync(join(stubDir, 'hosts')), false);
  client.close();
});
