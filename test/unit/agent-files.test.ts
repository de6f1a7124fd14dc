/**
 * vessel-agent's files, on the host in a temporary directory: raw bytes both ways through flow
 * control (100 MiB with its SHA-256), stat, listing, mkdir -p, remove -r, and the errors a
 * caller maps to API codes (ENOENT, EISDIR, ENOTEMPTY, EEXIST).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, mkdirSync, readFileSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { AgentError } from '../../src/vm/agent/agent-client.js';
import { buildAgent, privateBytes, sleep } from '../support/agent-harness.js';
import { agentFixture } from '../support/agent-fixture.js';

const build = buildAgent();
const skip = 'skip' in build ? build.skip : false;
const MIB = 1024 * 1024;
const fx = agentFixture('files', build);

const errno = (code: number) => (e: unknown) => e instanceof AgentError && e.kind === 'ERRNO' && e.errno === code;
const ENOENT = 2;
const EEXIST = 17;
const EISDIR = 21;
const ENOTEMPTY = 39;

async function sha256File(path: string): Promise<string> {
  const h = createHash('sha256');
  for await (const c of createReadStream(path)) h.update(c as Buffer);
  return h.digest('hex');
}

test('100 MiB round trip through flow control, checksums equal', { skip }, async (t) => {
  const path = join(fx.dir, 'big', 'file.bin');
  const sent = createHash('sha256');
  async function* source() {
    for (let i = 0; i < 100; i++) {
      const chunk = randomBytes(MIB);
      sent.update(chunk);
      yield chunk;
    }
  }
  let t0 = performance.now();
  const size = await fx.client.writeFile(path, source(), { mkdirs: true });
  const writeMs = performance.now() - t0;
  assert.equal(size, 100 * MIB);
  const digest = sent.digest('hex');
  assert.equal(await sha256File(path), digest, 'the bytes on disk are the bytes sent');

  t0 = performance.now();
  const { info, stream } = await fx.client.readFile(path);
  assert.equal(info.type, 'file');
  assert.equal(info.size, BigInt(100 * MIB));
  const got = createHash('sha256');
  let bytes = 0;
  for await (const c of stream) {
    got.update(c as Buffer);
    bytes += (c as Buffer).length;
  }
  const readMs = performance.now() - t0;
  assert.equal(bytes, 100 * MIB);
  assert.equal(got.digest('hex'), digest);
  t.diagnostic(`through the relay: write ${((100 / writeMs) * 1000).toFixed(0)} MiB/s (fsync included), read ${((100 / readMs) * 1000).toFixed(0)} MiB/s`);

  // The agent gives back what the transfer needed: an idle agent stays under 1 MiB private.
  await sleep(100);
  assert.ok(privateBytes(fx.agent.pid) < MIB, `agent private memory ${privateBytes(fx.agent.pid)} bytes`);
});

test('writes: mode, replace in place, empty file, missing parent without mkdirs', { skip }, async () => {
  const path = join(fx.dir, 'mode.txt');
  assert.equal(await fx.client.writeFile(path, Buffer.from('first version, longer'), { mode: 0o600 }), 21);
  assert.equal(statSync(path).mode & 0o777, 0o600);
  assert.equal(await fx.client.writeFile(path, Buffer.from('second')), 6);
  assert.equal(readFileSync(path, 'utf8'), 'second');
  assert.equal(await fx.client.writeFile(join(fx.dir, 'empty'), Buffer.alloc(0)), 0);
  assert.equal(statSync(join(fx.dir, 'empty')).size, 0);
  await assert.rejects(fx.client.writeFile(join(fx.dir, 'no', 'parent'), Buffer.from('x')), errno(ENOENT));
  await assert.rejects(fx.client.writeFile(fx.dir, Buffer.from('x')), errno(EISDIR));
  await assert.rejects(fx.client.writeFile('relative/path', Buffer.from('x')), RangeError);
});

test('reads: from an offset, a missing file, a directory, a small window', { skip }, async () => {
  const path = join(fx.dir, 'digits.txt');
  writeFileSync(path, '0123456789'.repeat(1000));
  const { stream } = await fx.client.readFile(path, { offset: 9995n, window: 4096 });
  let text = '';
  for await (const c of stream) text += (c as Buffer).toString();
  assert.equal(text, '56789');
  await assert.rejects(fx.client.readFile(join(fx.dir, 'missing')), errno(ENOENT));
  await assert.rejects(fx.client.readFile(fx.dir), errno(EISDIR));
  // A consumer that stops early cancels the stream; the channel goes on.
  const early = await fx.client.readFile(path, { window: 4096 });
  for await (const _ of early.stream) break;
  await fx.client.ping();
});

test('stat, list, mkdir -p, remove -r', { skip }, async () => {
  const root = join(fx.dir, 'tree');
  await fx.client.mkdir(join(root, 'a', 'b', 'c'), { parents: true, mode: 0o750 });
  assert.equal(statSync(join(root, 'a', 'b', 'c')).mode & 0o777, 0o750);
  await fx.client.mkdir(join(root, 'a', 'b', 'c'), { parents: true }); // exists: fine with parents
  await assert.rejects(fx.client.mkdir(join(root, 'a')), errno(EEXIST));
  writeFileSync(join(root, 'a', 'file.txt'), 'hello');
  symlinkSync('file.txt', join(root, 'a', 'link'));
  mkdirSync(join(root, 'a', 'many'));
  for (let i = 0; i < 3000; i++) writeFileSync(join(root, 'a', 'many', `entry-with-a-longish-name-${i}`), String(i));

  const st = await fx.client.stat(join(root, 'a', 'file.txt'));
  assert.equal(st.type, 'file');
  assert.equal(st.size, 5n);
  assert.equal(st.mtimeNs / 1_000_000n, BigInt(Math.floor(statSync(join(root, 'a', 'file.txt')).mtimeMs)));
  assert.equal((await fx.client.stat(join(root, 'a', 'link'))).type, 'file');
  assert.equal((await fx.client.stat(join(root, 'a', 'link'), { noFollow: true })).type, 'symlink');
  assert.equal((await fx.client.stat(root)).type, 'directory');
  await assert.rejects(fx.client.stat(join(root, 'nope')), errno(ENOENT));

  const entries = await fx.client.listDir(join(root, 'a'));
  assert.deepEqual(
    entries.map((e) => `${e.name}:${e.type}`).sort(),
    ['b:directory', 'file.txt:file', 'link:symlink', 'many:directory'],
  );
  assert.equal(entries.find((e) => e.name === 'file.txt')?.size, 5n);
  // Thousands of entries over several frames within a small window.
  const many = await fx.client.listDir(join(root, 'a', 'many'), { window: 4096 });
  assert.equal(many.length, 3000);
  assert.equal(new Set(many.map((e) => e.name)).size, 3000);
  await assert.rejects(fx.client.listDir(join(root, 'a', 'many'), { maxEntries: 100 }), RangeError);
  await fx.client.ping();

  await assert.rejects(fx.client.remove(join(root, 'a')), errno(ENOTEMPTY));
  await fx.client.remove(join(root, 'a', 'link'));
  assert.equal(readFileSync(join(root, 'a', 'file.txt'), 'utf8'), 'hello', 'removing a link leaves its target');
  await fx.client.remove(root, { recursive: true });
  await assert.rejects(fx.client.stat(root), errno(ENOENT));
  await assert.rejects(fx.client.remove('/'), (e: unknown) => e instanceof AgentError && e.kind === 'BAD_REQUEST');
});
