/**
 * The driver's directory operations (src/vm/guest-directories.ts) against the real vessel-agent
 * on the host, in a temporary directory, with the host's GNU tar: what the API answers for
 * listings, stats, mkdir and removal, and archives both ways, including tar failing before its
 * first byte, midway, and a consumer that goes away. No VM: test/vm/directories.test.ts does the
 * same through the service and a real guest.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, symlinkSync, utimesSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { VesselError } from '../../src/core/errors.js';
import { listGuestDir, makeGuestDir, readGuestArchive, removeGuestPath, statGuestPath, writeGuestArchive } from '../../src/vm/guest-directories.js';
import { buildAgent, sleep } from '../support/agent-harness.js';
import { agentFixture } from '../support/agent-fixture.js';

const build = buildAgent();
const skip = 'skip' in build ? build.skip : false;
const fx = agentFixture('dirs', build);
const agent = () => Promise.resolve(fx.client);

/** Rejects with a VesselError of this code whose message matches. */
async function refused(work: Promise<unknown>, code: string, message?: RegExp): Promise<void> {
  await assert.rejects(work, (err: unknown) => {
    assert.ok(err instanceof VesselError, String(err));
    assert.equal(err.code, code, err.message);
    if (message !== undefined) assert.match(err.message, message);
    return true;
  });
}

async function bytesOf(stream: Readable): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of stream) parts.push(c as Buffer);
  return Buffer.concat(parts);
}

const hostTar = (args: string[], input?: Buffer) => {
  const r = spawnSync('tar', args, { input, maxBuffer: 64 * 1024 * 1024 });
  assert.equal(r.status, 0, r.stderr?.toString());
  return r.stdout;
};

/** tar processes the agent still runs. */
const runningTars = async () => (await fx.client.listProcesses()).filter((p) => p.state === 'running' && p.command.startsWith('tar '));

test('list, stat, mkdir -p and remove answer as the API does', { skip }, async () => {
  const a = join(fx.dir, 'tree', 'a');
  await makeGuestDir(agent, join(a, 'b', 'c'));
  await makeGuestDir(agent, join(a, 'b', 'c')); // an existing directory is fine
  writeFileSync(join(a, 'one.txt'), 'hello');
  chmodSync(join(a, 'one.txt'), 0o640);
  symlinkSync('one.txt', join(a, 'link'));
  symlinkSync('nowhere', join(a, 'dangling'));
  const before = Date.now();

  const list = await listGuestDir(agent, a);
  assert.deepEqual(list.map((e) => [e.name, e.type]), [['b', 'directory'], ['dangling', 'symlink'], ['link', 'symlink'], ['one.txt', 'file']]);
  const one = list.find((e) => e.name === 'one.txt')!;
  assert.equal(one.path, join(a, 'one.txt'));
  assert.equal(one.size_bytes, 5);
  assert.equal(one.mode, 0o640);
  assert.ok(Math.abs(Date.parse(one.modified_at) - before) < 60_000, one.modified_at);
  assert.match(one.modified_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal((await listGuestDir(agent, `${a}/`))[0]!.path, join(a, 'b'), 'a trailing slash does not double');

  const followed = await statGuestPath(agent, join(a, 'link'), true);
  assert.deepEqual([followed.name, followed.type, followed.size_bytes, followed.mode], ['link', 'file', 5, 0o640]);
  assert.equal(typeof followed.uid, 'number');
  const itself = await statGuestPath(agent, join(a, 'link'), false);
  assert.deepEqual([itself.type, itself.size_bytes], ['symlink', 'one.txt'.length]);
  assert.equal((await statGuestPath(agent, '/', true)).name, '/');
  await refused(statGuestPath(agent, join(a, 'dangling'), true), 'not_found');
  assert.equal((await statGuestPath(agent, join(a, 'dangling'), false)).type, 'symlink');

  await refused(listGuestDir(agent, join(a, 'missing')), 'not_found', /directory '.*missing' not found/);
  await refused(listGuestDir(agent, join(a, 'one.txt')), 'invalid_argument', /is not a directory/);
  await refused(makeGuestDir(agent, join(a, 'one.txt', 'x')), 'invalid_argument', /not a directory/);
  await refused(makeGuestDir(agent, join(a, 'one.txt')), 'invalid_argument', /not a directory/);
  await refused(removeGuestPath(agent, join(a, 'b'), false), 'failed_precondition', /not empty; remove it with recursive=true/);
  await refused(removeGuestPath(agent, join(a, 'missing'), true), 'not_found');
  await removeGuestPath(agent, join(a, 'link'), false);
  assert.ok(existsSync(join(a, 'one.txt')), 'removing a link leaves its target');
  await removeGuestPath(agent, join(a, 'b'), true);
  assert.deepEqual((await listGuestDir(agent, a)).map((e) => e.name), ['dangling', 'one.txt']);
});

test('the real agent: a file of 1960 lists and stats as 1960, and a 255-byte name is a name', { skip }, async () => {
  const d = join(fx.dir, 'old');
  mkdirSync(d);
  const longest = 'n'.repeat(255);
  writeFileSync(join(d, longest), 'x');
  writeFileSync(join(d, 'old.txt'), 'x');
  // Before the epoch: the agent's u64 arithmetic sends it in two's complement, which read
  // unsigned said 2544.
  const t1960 = new Date('1960-01-01T00:00:00Z'); // a Date: Node takes a negative number for now
  utimesSync(join(d, 'old.txt'), t1960, t1960);
  const list = await listGuestDir(agent, d);
  assert.deepEqual(list.map((e) => [e.name.length, e.modified_at.slice(0, 4)]), [[255, String(new Date().getUTCFullYear())], [7, '1960']]);
  assert.equal(list[1]!.modified_at, '1960-01-01T00:00:00.000Z');
  assert.equal((await statGuestPath(agent, join(d, 'old.txt'), true)).modified_at, '1960-01-01T00:00:00.000Z');
});

test('an archive download is the tree, checked by the host tar; errors come before the first byte', { skip }, async () => {
  const src = join(fx.dir, 'down');
  mkdirSync(join(src, 'sub', 'deep'), { recursive: true });
  const blob = randomBytes(300_000);
  writeFileSync(join(src, 'sub', 'deep', 'blob.bin'), blob);
  writeFileSync(join(src, 'top.txt'), 'top');
  symlinkSync('top.txt', join(src, 'alias'));

  const archive = await bytesOf(await readGuestArchive(agent, src));
  const names = hostTar(['-tf', '-'], archive).toString().trim().split('\n').sort();
  assert.deepEqual(names, ['./', './alias', './sub/', './sub/deep/', './sub/deep/blob.bin', './top.txt']);
  const out = mkdtempSync(join(fx.dir, 'out-'));
  hostTar(['-C', out, '-xf', '-'], archive);
  assert.ok(readFileSync(join(out, 'sub', 'deep', 'blob.bin')).equals(blob));

  await refused(readGuestArchive(agent, join(fx.dir, 'no-such-dir')), 'not_found');
  await refused(readGuestArchive(agent, join(src, 'top.txt')), 'invalid_argument', /is not a directory/);
});

test('tar killed midway breaks the archive stream with an error, never a short archive', { skip }, async () => {
  const src = join(fx.dir, 'midway');
  mkdirSync(src);
  writeFileSync(join(src, 'big.bin'), randomBytes(8 * 1024 * 1024));
  const stream = await readGuestArchive(agent, src);
  const it = stream[Symbol.asyncIterator]();
  assert.equal((await it.next()).done, false);
  // The stream is not read meanwhile: with HOLD, tar waits on its pipe, and is still running.
  const [tar] = await runningTars();
  assert.ok(tar !== undefined, 'tar runs while its archive is unread');
  await fx.client.signal(tar.id, 'SIGKILL');
  await assert.rejects(
    (async () => {
      for (;;) if ((await it.next()).done) break;
    })(),
    /tar failed while archiving .* \(killed by signal 9\)/,
  );
});

test('a consumer that goes away kills tar', { skip }, async () => {
  const src = join(fx.dir, 'abandoned');
  mkdirSync(src);
  writeFileSync(join(src, 'big.bin'), randomBytes(8 * 1024 * 1024));
  const stream = await readGuestArchive(agent, src);
  await stream[Symbol.asyncIterator]().next();
  assert.equal((await runningTars()).length, 1);
  stream.destroy();
  for (let i = 0; i < 100 && (await runningTars()).length > 0; i++) await sleep(20);
  assert.deepEqual(await runningTars(), []);
  // Gone before its first read: the archive's generator never ran, and tar still goes.
  (await readGuestArchive(agent, src)).destroy();
  for (let i = 0; i < 100 && (await runningTars()).length > 0; i++) await sleep(20);
  assert.deepEqual(await runningTars(), []);
});

test('an archive upload extracts into a new directory; bad archives are invalid_argument with tar\'s words', { skip }, async () => {
  const src = join(fx.dir, 'up-src');
  mkdirSync(join(src, 'd'), { recursive: true });
  const blob = randomBytes(200_000);
  writeFileSync(join(src, 'd', 'blob.bin'), blob);
  writeFileSync(join(src, 'x.txt'), 'x');
  const archive = hostTar(['-C', src, '-cf', '-', '.']);

  const dest = join(fx.dir, 'up', 'new', 'dest');
  // Small chunks, so the body is read as tar takes it.
  const chunks = Array.from({ length: Math.ceil(archive.length / 7000) }, (_, i) => archive.subarray(i * 7000, (i + 1) * 7000));
  assert.equal(await writeGuestArchive(agent, dest, Readable.from(chunks), 1 << 30), archive.length);
  assert.ok(readFileSync(join(dest, 'd', 'blob.bin')).equals(blob));
  assert.equal(readFileSync(join(dest, 'x.txt'), 'utf8'), 'x');

  await refused(writeGuestArchive(agent, join(fx.dir, 'up', 'junk'), Readable.from([randomBytes(64 * 1024)]), 1 << 30), 'invalid_argument', /does not look like a tar archive/);
  await refused(writeGuestArchive(agent, join(fx.dir, 'up', 'cut'), Readable.from([archive.subarray(0, 100_000)]), 1 << 30), 'invalid_argument', /Unexpected EOF/);
  await refused(writeGuestArchive(agent, join(dest, 'x.txt'), Readable.from([archive]), 1 << 30), 'invalid_argument', /not a directory/);
  const over = writeGuestArchive(agent, join(fx.dir, 'up', 'over'), Readable.from(chunks), 50_000);
  await assert.rejects(over, (err: unknown) => err instanceof VesselError && err.httpStatus === 413 && /archive is larger than the limit of 50000 bytes/.test(err.message));
  for (let i = 0; i < 100 && (await runningTars()).length > 0; i++) await sleep(20);
  assert.deepEqual(await runningTars(), [], 'the tar of a refused upload does not wait for the rest');
});
