/**
 * The agent's process (src/vm/agent/agent-process.ts, started by src/vm/agent-part.ts), with no
 * VM: a real vessel-agent runs on the host behind a QEMU-like relay (agent-harness.ts), the
 * service side hands the process the connection, and the GuestAgent port is used as the core
 * uses it (RemoteGuestAgent). Then kill -9 of the process in the middle of a streaming exec and
 * an upload: those fail as unavailable, a new process is started, the next requests work over a
 * new connection, and the guest's processes are all still there.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { runBuffered } from '../../src/core/commands.js';
import { VesselError } from '../../src/core/errors.js';
import type { ProcessSpec } from '../../src/core/types.js';
import { AgentPart } from '../../src/vm/agent-part.js';
import { RemoteGuestAgent } from '../../src/vm/remote-guest-agent.js';
import { R, T, encodeFrame } from '../../src/vm/agent/frames.js';
import { RelayedAgent, buildAgent } from '../support/agent-harness.js';
import { FakeAgent, statPayload } from '../support/agent-fake.js';

const build = buildAgent();
const skip = 'skip' in build ? build.skip : process.getuid?.() !== 0 ? 'the agent process drops from root to its own user' : false;
const log = { info: () => undefined, warn: () => undefined, error: () => undefined };
const dir = mkdtempSync(join(tmpdir(), 'vessel-agent-part-'));
const part = new AgentPart({ logLevel: 'warn', log });
let relay: RelayedAgent | null = null;
const guest = new RemoteGuestAgent(() => part.runtime('rt-1', relay!.path, () => false));

after(async () => {
  await part.close();
  await relay?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const spec = (command: string, over: Partial<ProcessSpec> = {}): ProcessSpec => ({
  command,
  args: [],
  cwd: null,
  env: {},
  user: null,
  pty: null,
  stdin: false,
  ringBytes: 1 << 20,
  hold: true,
  forgetOnExit: false,
  ...over,
});

const exec = (command: string, stdin: string | null = null) =>
  runBuffered(guest, { command, args: [], cwd: null, env: {}, user: null, stdin, maxOutputBytes: 1 << 20, timeoutSecs: 30 });

async function newPid(old: number): Promise<number> {
  for (let i = 0; i < 600; i++) {
    const pid = part.pid;
    if (pid !== null && pid !== old) return pid;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('no new agent process');
}

test('the port through the agent process: processes, files, directories, archives', { skip }, async () => {
  relay = await RelayedAgent.start((build as { binary: string }).binary, dir);
  await part.start();
  const status = readFileSync(`/proc/${part.pid}/status`, 'utf8');
  assert.doesNotMatch(status, /^Uid:\s+0\s/m, 'the process is not root');
  for (const set of ['CapInh', 'CapPrm', 'CapEff']) assert.match(status, new RegExp(`^${set}:\\s+0+$`, 'm'), `${set} is empty`);

  const r = await exec('cat; echo err >&2; exit 3', 'x'.repeat(300_000));
  assert.equal(r.exit_code, 3);
  assert.equal(r.stdout.length, 300_000, 'stdin out through stdout, flow-controlled both ways');
  assert.equal(r.stderr, 'err\n');
  await assert.rejects(exec('true').then(() => guest.spawnProcess(spec('x', { args: ['y'], cwd: '/nonexistent' }))), (e: VesselError) => e.code === 'command_failed');

  const file = join(dir, 'sub', 'f.bin');
  const bytes = Buffer.alloc(3 * 1024 * 1024 + 5, 0x61);
  assert.equal(await guest.writeFile(file, Readable.from([bytes]), 16 << 20), bytes.length);
  const back: Buffer[] = [];
  for await (const c of await guest.readFile(file)) back.push(c as Buffer);
  assert.ok(Buffer.concat(back).equals(bytes));
  await assert.rejects(guest.writeFile(join(dir, 'big'), Readable.from([bytes]), 1000), (e: VesselError) => e.httpStatus === 413);
  assert.equal(await guest.writeFile(join(dir, 'big'), Readable.from([]), 1000), 0, 'an empty upload ends before the process has taken its stream');
  await assert.rejects(guest.readFile(join(dir, 'missing')), (e: VesselError) => e.code === 'not_found');
  await guest.makeDir(join(dir, 'd', 'e'));
  const listing = await guest.listDir(dir);
  assert.deepEqual(listing.map((e) => `${e.name}:${e.type}`), ['big:file', 'd:directory', ...listing.filter((e) => e.name.startsWith('agent-')).map((e) => `${e.name}:socket`), 'sub:directory'].sort());
  assert.equal(listing.find((e) => e.name === 'sub')!.path, `${dir}/sub`);
  const st = await guest.statPath(file, true);
  assert.equal(st.size_bytes, bytes.length);
  assert.equal(st.name, 'f.bin');

  const archive: Buffer[] = [];
  for await (const c of await guest.readArchive(join(dir, 'sub'))) archive.push(c as Buffer);
  await guest.writeArchive(join(dir, 'copy'), Readable.from([Buffer.concat(archive)]), 64 << 20);
  assert.equal((await guest.statPath(join(dir, 'copy', 'f.bin'), true)).size_bytes, bytes.length);
  await guest.removePath(join(dir, 'copy'), true);
  await assert.rejects(guest.statPath(join(dir, 'copy'), true), (e: VesselError) => e.code === 'not_found');
});

test('kill -9 of the agent process: what was in flight fails as unavailable, the next requests work, the guest keeps its processes', { skip }, async () => {
  const sleeper = await guest.spawnProcess(spec('sleep 600', { hold: false }));
  sleeper.detach();
  const streaming = await guest.spawnProcess(spec('while true; do echo tick; sleep 0.05; done'));
  const first = await streaming[Symbol.asyncIterator]().next();
  assert.equal(first.done, false);
  // An upload that has started and waits for the rest of its body.
  let more: () => void = () => undefined;
  const body = Readable.from(
    (async function* () {
      yield Buffer.alloc(1000, 0x62);
      await new Promise<void>((resolve) => (more = resolve));
      yield Buffer.alloc(1000, 0x62);
    })(),
  );
  const upload = guest.writeFile(join(dir, 'upload.bin'), body, 1 << 20);
  upload.catch(() => undefined);

  const pid = part.pid!;
  process.kill(pid, 'SIGKILL');
  const reading = (async () => {
    for await (const _ of streaming);
  })();
  await assert.rejects(reading, (e: VesselError) => e.code === 'unavailable', 'a stream in flight fails as unavailable');
  await assert.rejects(streaming.done, (e: VesselError) => e.code === 'unavailable');
  more();
  await assert.rejects(upload, (e: VesselError) => e.code === 'unavailable', 'an upload in flight fails as unavailable');

  await newPid(pid);
  const list = await guest.listProcesses();
  assert.ok(list.some((p) => p.id === sleeper.state.id && p.status === 'running'), 'a process started before the kill runs on');
  assert.ok(list.some((p) => p.id === streaming.state.id && p.status === 'running'), 'and so does the one whose stream was cut');
  const resumed = await guest.attachProcess(streaming.state.id, { from: 'end', follow: true, input: false });
  const tick = await resumed[Symbol.asyncIterator]().next();
  assert.equal(tick.value?.data.toString(), 'tick\n', 'its output can be read again');
  resumed.detach();
  await guest.signalProcess(streaming.state.id, 9, true);
  await guest.signalProcess(sleeper.state.id, 9, true);
  assert.equal((await exec('echo after')).stdout, 'after\n');
  assert.equal(await guest.writeFile(join(dir, 'upload.bin'), Readable.from([Buffer.alloc(2000, 0x62)]), 1 << 20), 2000);
});

test('a guest that breaks its channel costs that connection: the next request hands the process a new one', { skip }, async () => {
  let broken = 0;
  const fake = await FakeAgent.start(dir, 'garbage', async (f, conn) => {
    if (f.type !== T.STAT) return;
    if (conn === fake.connections[0]) {
      broken++;
      await conn.write(Buffer.from([0x56, 0x8e, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, ...Buffer.alloc(64, 0xee)]));
      return;
    }
    await conn.write(encodeFrame(R.STAT, f.stream, statPayload({ size: 42n })));
    await conn.write(encodeFrame(R.END, f.stream));
  });
  const pid = part.pid;
  const other = new RemoteGuestAgent(() => part.runtime('rt-garbage', fake.path, () => false));
  await assert.rejects(other.statPath('/x', true), (e: VesselError) => e.code === 'unavailable', 'the request the garbage answered fails');
  assert.equal(broken, 1);
  assert.equal((await other.statPath('/x', true)).size_bytes, 42, 'the next one reconnects');
  assert.equal(fake.connections.length, 2);
  assert.equal(part.pid, pid, 'the process was not hurt');
  await fake.stop();
});

test('garbage behind the agent\'s back for a while: the requests meanwhile fail as unavailable, the ones after work', { skip }, async () => {
  const pid = part.pid;
  const huge = Buffer.from([0x56, 0x8e, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f]);
  let flowing = true;
  const garbage = (async () => {
    for (let sent = 0; sent < 4 << 20; sent += 65536) {
      relay!.injectToClient(Buffer.concat([randomBytes(65536), huge]));
      await new Promise((r) => setTimeout(r, 5));
    }
    flowing = false;
  })();
  const statuses: string[] = [];
  while (flowing) {
    try {
      await exec('echo ok');
      statuses.push('ok');
    } catch (err) {
      assert.equal((err as VesselError).code, 'unavailable', String(err));
      statuses.push('unavailable');
    }
  }
  await garbage;
  assert.ok(statuses.includes('unavailable'), 'the garbage reached the channel');
  assert.equal((await exec('echo after')).stdout, 'after\n', `recovered (${statuses.join(',')})`);
  assert.equal(part.pid, pid, 'the process was not hurt');
});

test('stdin written and ended, then detached at once (as a stdin request does): every byte and the end reach the process', { skip, timeout: 60_000 }, async () => {
  const started = await guest.spawnProcess(spec('cat', { stdin: true }));
  const pid = started.state.id;
  started.detach();
  for (let round = 0; round < 20; round++) {
    const writer = await guest.attachProcess(pid, { from: 'end', follow: true, input: true });
    void (async () => {
      for await (const _ of writer);
    })().catch(() => undefined);
    await writer.write(Buffer.from(`line-${round}\n`));
    if (round === 19) writer.endInput();
    writer.detach();
  }
  const reader = await guest.attachProcess(pid, { from: 'oldest', follow: true, input: false });
  let out = '';
  for await (const chunk of reader) out += chunk.data.toString();
  assert.equal(out, Array.from({ length: 20 }, (_, i) => `line-${i}\n`).join(''));
  assert.equal((await reader.done)?.exitCode, 0, 'cat saw the end of its input');
});
