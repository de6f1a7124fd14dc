/**
 * What the API acknowledges survives a crash.
 *
 * - A VM killed (-9) right after a file write was answered: after a start the file is there, whole.
 * - A torn or empty state file is found at the next start and reported, never a stack trace.
 * - The host side, by its system calls: the service runs under strace, and for each path the
 *   trace shows the flush to disk before the reply that acknowledges it. This stands in for a
 *   power-cut simulation: this kernel has no device-mapper (dm-flakey), and a copy of a loop
 *   device's file races the kernel's writeback. The order check fails as soon as a path stops
 *   flushing (synchronous=NORMAL leaves no fdatasync between a write's request and its reply; a
 *   plain writeFileSync leaves no fsync before the rename).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { Database } from '../../src/store/sqlite-driver.js';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sqliteFile } from '../../src/store/open-store.js';
import { Service } from '../support/service.js';

const TIMEOUT = { timeout: 600_000 };
const traceDir = mkdtempSync(join(tmpdir(), 'vessel-trace-'));
const TRACE = join(traceDir, 'service.trace');
// Every thread of the service (-f: large files are flushed on libuv's threads), but none of the
// programs it starts (-b execve detaches a child at its exec), so QEMU and its helpers stay untraced.
const API_TRACE = join(traceDir, 'api.trace');
const STRACE_ARGS = ['-qq', '-f', '-b', 'execve', '-y', '-s', '1000', '-ttt', '-e', 'trace=fsync,fdatasync,rename,renameat,renameat2,link,linkat,read,write,writev'];
const svc = new Service({ VESSEL_WARM_POOL: '0' }, undefined, ['strace', ...STRACE_ARGS, '-o', TRACE]);
before(() => svc.start(), { timeout: 900_000 });
after(async () => {
  await svc.destroy();
  rmSync(traceDir, { recursive: true, force: true });
});

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function put(rt: string, path: string, data: Buffer): Promise<void> {
  const r = await fetch(`${svc.url}/v1/runtimes/${rt}/files?path=${encodeURIComponent(path)}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/octet-stream' },
    body: new Uint8Array(data),
  });
  assert.equal(r.status, 200, await r.text());
}

async function get(rt: string, path: string): Promise<Buffer | number> {
  const r = await fetch(`${svc.url}/v1/runtimes/${rt}/files?path=${encodeURIComponent(path)}`, { headers: { authorization: `Bearer ${svc.token}` } });
  return r.status === 200 ? Buffer.from(await r.arrayBuffer()) : r.status;
}

async function waitStatus(rt: string, status: string): Promise<any> {
  for (let i = 0; i < 300; i++) {
    const body = (await svc.call('GET', `/v1/runtimes/${rt}`)).body.data;
    if (body.status === status) return body;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${rt} never became ${status}`);
}

const qemuPid = (id: string) => Number(readFileSync(join(svc.dataDir, 'runtimes', id, 'qemu.pid'), 'utf8'));

test('files written through the API survive a kill -9 of their VM right after the reply: 1 byte, 10 MiB, 40 small files', TIMEOUT, async () => {
  const rt = (await svc.call('POST', '/v1/runtimes', { display_name: 'dur' })).body.data;
  const files = new Map<string, Buffer>([
    ['/root/one', Buffer.from('x')],
    ['/data/big.bin', randomBytes(10 * 1024 * 1024)],
    ...Array.from({ length: 40 }, (_, i) => [`/root/many/d${i % 5}/f${i}`, randomBytes(1 + ((i * 977) % 8192))] as [string, Buffer]),
  ]);
  for (const [path, data] of files) await put('dur', path, data);
  process.kill(qemuPid(rt.id), 'SIGKILL');
  const crashed = await waitStatus('dur', 'crashed');
  assert.match(crashed.status_message, /exited unexpectedly/);
  assert.equal((await svc.call('POST', '/v1/runtimes/dur/start')).status, 200);
  for (const [path, data] of files) {
    const got = await get('dur', path);
    assert.ok(Buffer.isBuffer(got), `${path}: ${String(got)}`);
    assert.equal(sha256(got), sha256(data), path);
  }
});

test('a torn or empty state file is found after a restart and reported; the service itself starts', TIMEOUT, async () => {
  const torn = (await svc.call('POST', '/v1/runtimes', { display_name: 'torn' })).body.data;
  const empty = (await svc.call('POST', '/v1/runtimes', { display_name: 'empty' })).body.data;
  assert.equal((await svc.call('POST', '/v1/runtimes/empty/stop')).status, 200);
  await svc.kill9();
  const tornFile = join(svc.dataDir, 'runtimes', torn.id, 'vm.json');
  truncateSync(tornFile, Math.floor(readFileSync(tornFile).length / 2));
  writeFileSync(join(svc.dataDir, 'runtimes', empty.id, 'vm.json'), '');
  await svc.start();
  const t = (await svc.call('GET', '/v1/runtimes/torn')).body.data;
  assert.equal(t.status, 'crashed');
  assert.match(t.status_message, /state file is damaged/);
  const start = await svc.call('POST', '/v1/runtimes/empty/start');
  assert.equal(start.status, 503);
  assert.match(start.body.error.message, /state file is damaged/);
  const e = (await svc.call('GET', '/v1/runtimes/empty')).body.data;
  assert.equal(e.status, 'crashed');
  assert.match(e.status_message, /state file is damaged/);
  for (const name of ['torn', 'empty']) assert.equal((await svc.call('DELETE', `/v1/runtimes/${name}`)).status, 200);
});

test('a VM whose record was lost is removed at the next start, with a log line, never adopted', TIMEOUT, async () => {
  const rt = (await svc.call('POST', '/v1/runtimes', { display_name: 'orphan' })).body.data;
  const pid = qemuPid(rt.id);
  await svc.kill9();
  const db = new Database(sqliteFile(svc.dataDir));
  db.prepare('DELETE FROM runtimes WHERE id = ?').run(rt.id);
  db.close();
  await svc.start();
  assert.equal(existsSync(join(svc.dataDir, 'runtimes', rt.id)), false, 'its directory is gone');
  assert.throws(() => process.kill(pid, 0), 'its QEMU is gone');
  assert.match(svc.log, new RegExp(`"runtimeId":"${rt.id}".*no runtime record`));
  assert.equal((await svc.call('GET', `/v1/runtimes/${rt.id}`)).status, 404);
});

/**
 * The API's process, which the service's strace let go at its exec (-b execve, so that QEMU runs
 * untraced), traced by a strace of its own from now on; resolves once it is attached.
 */
async function traceApi(): Promise<() => Promise<void>> {
  const pid = svc.partPid('api');
  assert.ok(pid !== null, 'the API process runs');
  const tracer = spawn('strace', [...STRACE_ARGS, '-p', String(pid), '-o', API_TRACE], { stdio: 'ignore' });
  const tracerPid = () => /^TracerPid:\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))?.[1];
  for (let i = 0; i < 200 && tracerPid() !== String(tracer.pid); i++) await new Promise((r) => setTimeout(r, 50));
  assert.equal(tracerPid(), String(tracer.pid), 'strace attached to the API process');
  return () =>
    new Promise<void>((resolve) => {
      tracer.once('exit', () => resolve());
      tracer.kill('SIGINT');
    });
}

/**
 * The service's and the API's traces as one (strace's \" unescaped, the thread id and time
 * dropped), one line per system call in the order the calls *ended*: a call another thread
 * interrupted (`<unfinished ...>`) is put together with its `<... resumed>` part and placed
 * there, so a flush counts only once it is done. The two processes' lines are ordered by their
 * times (-ttt): what one process did before it told the other comes first.
 */
function trace(): string[] {
  const entries: Array<{ at: number; call: string }> = [];
  for (const file of [TRACE, API_TRACE]) {
    if (!existsSync(file)) continue;
    const unfinished = new Map<string, string>();
    for (const raw of readFileSync(file, 'utf8').replaceAll('\\"', '"').split('\n')) {
      const m = /^(\d+) +(\d+\.\d+) (.*)$/.exec(raw);
      if (m === null) continue;
      const [, tid = '', at = '0', call = ''] = m;
      if (call.endsWith('<unfinished ...>')) {
        unfinished.set(tid, call.slice(0, -'<unfinished ...>'.length));
        continue;
      }
      const resumed = /^<\.\.\. \w+ resumed>(.*)$/.exec(call);
      entries.push({ at: Number(at), call: resumed !== null ? (unfinished.get(tid) ?? '') + resumed[1] : call });
      if (resumed !== null) unfinished.delete(tid);
    }
  }
  return entries.sort((a, b) => a.at - b.at).map((e) => e.call);
}
const flushes = (line: string, path: RegExp) => /^f(data)?sync\(\d+</.test(line) && path.test(line);
/** A write to a client connection holding `text`: part of a reply. */
const reply = (line: string, text: string) => /^(write|writev)\(\d+<(TCP|socket)/.test(line) && line.includes(text);

test('the trace shows each acknowledged write flushed before its reply', TIMEOUT, async () => {
  const stopTracingApi = await traceApi();
  const name = `durable-${randomBytes(4).toString('hex')}`;
  assert.equal((await svc.call('POST', '/v1/secrets', { name, value: 'v' })).status, 201);
  const rt = (await svc.call('POST', '/v1/runtimes', { display_name: 'traced' })).body.data;
  const cp = (await svc.call('POST', '/v1/runtimes/traced/checkpoints', { name: 'traced-cp' })).body.data;
  for (let i = 0; i < 600; i++) {
    if ((await svc.call('GET', `/v1/checkpoints/${cp.id}`)).body.data.state !== 'creating') break;
    await new Promise((r) => setTimeout(r, 100));
  }
  await stopTracingApi();
  const lines = trace();
  const at = (pred: (l: string) => boolean, from = 0): number => {
    for (let i = from; i < lines.length; i++) if (pred(lines[i]!)) return i;
    return -1;
  };

  // A secret's create: the WAL is on disk between the request and the reply.
  const request = at((l) => /^read\(\d+<(TCP|socket)/.test(l) && l.includes(name));
  const created = at((l) => reply(l, `"display_name":"${name}"`), request);
  assert.ok(request >= 0 && created > request, 'the request and its reply are in the trace');
  assert.ok(lines.slice(request, created).some((l) => flushes(l, /vessel\.db-wal>/)), 'the WAL was flushed before the 201');

  // A runtime's state file: written aside, flushed, renamed over, its directory flushed, before the create's reply.
  const runtimeDir = join(svc.dataDir, 'runtimes', rt.id);
  const createdRt = at((l) => reply(l, `"id":"${rt.id}"`));
  const tmpFlush = at((l) => flushes(l, new RegExp(`${runtimeDir}/\\.vm\\.json\\.\\d+\\.tmp>`)));
  const rename = at((l) => /^rename/.test(l) && l.includes(`${runtimeDir}/vm.json"`), tmpFlush);
  const dirFlush = at((l) => flushes(l, new RegExp(`${runtimeDir}>`)), rename);
  assert.ok(tmpFlush >= 0 && rename > tmpFlush && dirFlush > rename && createdRt > dirFlush, `vm.json: flush ${tmpFlush}, rename ${rename}, dir ${dirFlush}, reply ${createdRt}`);

  // A checkpoint: its files and their directories flushed before any reply says it is ready.
  const cpDir = join(svc.dataDir, 'checkpoints', cp.id);
  const ready = at((l) => reply(l, `"id":"${cp.id}"`) && l.includes('"state":"ready"'));
  assert.ok(ready >= 0, 'a reply said ready');
  for (const [what, path] of [
    ['state', new RegExp(`${cpDir}/state>`)],
    ['disk layer', new RegExp(`${join(svc.dataDir, 'layers', cp.id)}\\.qcow2>`)],
    ['checkpoint directory', new RegExp(`${cpDir}>`)],
    ['manifest', new RegExp(`${cpDir}/\\.manifest\\.json\\.\\d+\\.tmp>`)],
    ['layer directory', new RegExp(`${join(svc.dataDir, 'layers')}>`)],
  ] as const) {
    const i = at((l) => flushes(l, path));
    assert.ok(i >= 0 && i < ready, `${what} flushed (${i}) before the ready reply (${ready})`);
  }
});
