/**
 * The directory routes on a real VM through the real service, as a user goes about it: make a
 * tree, write into it, list and stat it, download it as tar and read it with the host's tar,
 * upload a tar built on the host, remove, and the errors on the way. One runtime for the file.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Service } from '../support/service.js';

const svc = new Service({ VESSEL_WARM_POOL: '0' });
const TIMEOUT = { timeout: 300_000 };
const host = mkdtempSync(join(tmpdir(), 'vessel-dirs-'));

before(async () => {
  await svc.start();
  const r = await svc.call('POST', '/v1/runtimes', { display_name: 'dirs' });
  assert.equal(r.status, 201, JSON.stringify(r.body));
}, { timeout: 900_000 });
after(async () => {
  await svc.destroy();
  rmSync(host, { recursive: true, force: true });
});

const q = encodeURIComponent;
const auth = () => ({ authorization: `Bearer ${svc.token}` });
const files = (route: string, path: string, extra = '') => `${svc.url}/v1/runtimes/dirs/files${route}?path=${q(path)}${extra}`;
const call = (method: string, route: string, path: string, extra = '') => svc.call(method, `/v1/runtimes/dirs/files${route}?path=${q(path)}${extra}`);
const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function sh(command: string): Promise<string> {
  const r = await svc.call('POST', '/v1/runtimes/dirs/exec', { command });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.data.exit_code, 0, JSON.stringify(r.body.data));
  return r.body.data.stdout;
}

async function put(path: string, data: Buffer | string): Promise<void> {
  const r = await fetch(files('', path), { method: 'PUT', headers: { ...auth(), 'content-type': 'application/octet-stream' }, body: typeof data === 'string' ? data : new Uint8Array(data) });
  assert.equal(r.status, 200, await r.text());
}

function isError(r: { status: number; body: any }, status: number, code: string, message?: RegExp): void {
  assert.equal(r.status, status, JSON.stringify(r.body));
  assert.equal(r.body.error.code, code, JSON.stringify(r.body));
  if (message !== undefined) assert.match(r.body.error.message, message);
}

function hostTar(args: string[], input?: Buffer): string {
  const r = spawnSync('tar', args, { input, maxBuffer: 64 * 1024 * 1024 });
  assert.equal(r.status, 0, r.stderr.toString());
  return r.stdout.toString();
}

const blob = randomBytes(300_000);

test('mkdir -p, files written into the tree, then listed and described', TIMEOUT, async () => {
  let r = await call('POST', '/mkdir', '/work/a/b/c');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, { data: { path: '/work/a/b/c' } });
  assert.equal((await call('POST', '/mkdir', '/work/a/b/c')).status, 200, 'mkdir -p of an existing directory');
  await put('/work/a/hello.txt', 'hello world');
  await put('/work/a/b/blob.bin', blob);
  await sh('chmod 600 /work/a/hello.txt && ln -s hello.txt /work/a/link && ln -s /nowhere /work/a/dangling && mkfifo /work/a/pipe');

  const started = Date.now();
  r = await call('GET', '/list', '/work/a');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const list = r.body.data as any[];
  assert.deepEqual(list.map((e) => [e.name, e.type]), [['b', 'directory'], ['dangling', 'symlink'], ['hello.txt', 'file'], ['link', 'symlink'], ['pipe', 'fifo']]);
  const hello = list.find((e) => e.name === 'hello.txt');
  assert.deepEqual([hello.path, hello.size_bytes, hello.mode], ['/work/a/hello.txt', 11, 0o600]);
  assert.equal(list.find((e) => e.name === 'b').mode, 0o755, 'mkdir -p makes 0755 directories');
  for (const e of list) assert.ok(Math.abs(Date.parse(e.modified_at) - started) < 120_000, `${e.name}: ${e.modified_at} is the guest's now`);
  const sub = (await call('GET', '/list', '/work/a/b')).body.data as any[];
  assert.deepEqual(sub.map((e) => [e.name, e.type, e.type === 'file' ? e.size_bytes : null]), [['blob.bin', 'file', blob.length], ['c', 'directory', null]]);

  r = await call('GET', '/stat', '/work/a/link');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual([r.body.data.name, r.body.data.path, r.body.data.type, r.body.data.size_bytes, r.body.data.mode, r.body.data.uid, r.body.data.gid], ['link', '/work/a/link', 'file', 11, 0o600, 0, 0]);
  r = await call('GET', '/stat', '/work/a/link', '&follow_symlinks=false');
  assert.deepEqual([r.body.data.type, r.body.data.size_bytes, r.body.data.mode], ['symlink', 'hello.txt'.length, 0o777]);
  isError(await call('GET', '/stat', '/work/a/dangling'), 404, 'not_found');
  assert.equal((await call('GET', '/stat', '/work/a/dangling', '&follow_symlinks=false')).body.data.type, 'symlink');
});

test('the tree downloaded as tar is what the host tar reads', TIMEOUT, async () => {
  const res = await fetch(files('/archive', '/work'), { headers: auth() });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get('content-type'), 'application/x-tar');
  assert.equal(res.headers.get('content-disposition'), 'attachment; filename="work.tar"');
  const archive = Buffer.from(await res.arrayBuffer());
  const listing = hostTar(['-tvf', '-'], archive);
  const entries = new Map(listing.trim().split('\n').map((line) => [line.split(/\s+/).slice(5).join(' '), line]));
  assert.deepEqual([...entries.keys()].sort(), ['./', './a/', './a/b/', './a/b/blob.bin', './a/b/c/', './a/dangling -> /nowhere', './a/hello.txt', './a/link -> hello.txt', './a/pipe'].sort(), listing);
  assert.match(entries.get('./a/hello.txt')!, /^-rw------- root\/root\s+11 /);
  assert.match(entries.get('./a/b/blob.bin')!, new RegExp(`^-rw-r--r-- root/root\\s+${blob.length} `));
  assert.match(entries.get('./a/pipe')!, /^p/);
  const out = join(host, 'download');
  mkdirSync(out);
  hostTar(['-C', out, '-xf', '-'], archive);
  assert.equal(sha256(spawnSync('cat', [join(out, 'a/b/blob.bin')]).stdout), sha256(blob));
});

test('a tar built on the host, uploaded into a new directory, reads back', TIMEOUT, async () => {
  const src = join(host, 'upload');
  mkdirSync(join(src, 'nested'), { recursive: true });
  writeFileSync(join(src, 'nested', 'x.txt'), 'from the host\n');
  const big = randomBytes(1024 * 1024);
  writeFileSync(join(src, 'big.bin'), big);
  const archive = spawnSync('tar', ['-C', src, '-cf', '-', '.']).stdout;
  const res = await fetch(files('/archive', '/restored/here'), { method: 'PUT', headers: { ...auth(), 'content-type': 'application/x-tar' }, body: new Uint8Array(archive) });
  assert.equal(res.status, 200);
  assert.deepEqual(await res.json(), { data: { path: '/restored/here', size_bytes: archive.length } });
  const got = await fetch(files('', '/restored/here/nested/x.txt'), { headers: auth() });
  assert.equal(await got.text(), 'from the host\n');
  assert.equal((await sh('sha256sum /restored/here/big.bin')).split(' ')[0], sha256(big));
});

test('remove: refused on a non-empty directory unless recursive, then gone from its parent', TIMEOUT, async () => {
  isError(await call('DELETE', '', '/work/a'), 409, 'failed_precondition', /not empty; remove it with recursive=true/);
  assert.equal((await call('GET', '/list', '/work')).body.data.length, 1, 'nothing was removed');
  let r = await call('DELETE', '', '/work/a/link');
  assert.deepEqual([r.status, r.body], [200, { data: {} }]);
  assert.equal((await call('GET', '/stat', '/work/a/hello.txt')).status, 200, 'the link went, not its target');
  r = await call('DELETE', '', '/work/a', '&recursive=true');
  assert.deepEqual([r.status, r.body], [200, { data: {} }]);
  assert.deepEqual((await call('GET', '/list', '/work')).body.data, []);
  isError(await call('DELETE', '', '/work/a'), 404, 'not_found');
  isError(await call('DELETE', '', '/', '&recursive=true'), 400, 'invalid_argument');
});

test('errors: missing, not a directory, relative, a corrupt archive; the runtime goes on', TIMEOUT, async () => {
  isError(await call('GET', '/list', '/no/such/dir'), 404, 'not_found', /directory '\/no\/such\/dir' not found/);
  isError(await call('GET', '/list', '/restored/here/nested/x.txt'), 400, 'invalid_argument', /not a directory/);
  isError(await call('GET', '/list', 'relative/dir'), 400, 'invalid_argument', /must be absolute/);
  isError(await call('GET', '/stat', '/no/such/path'), 404, 'not_found');
  isError(await call('POST', '/mkdir', '/restored/here/nested/x.txt/sub'), 400, 'invalid_argument', /not a directory/);
  isError(await call('GET', '/archive', '/no/such/dir'), 404, 'not_found');
  isError(await call('GET', '/archive', '/restored/here/big.bin'), 400, 'invalid_argument', /not a directory/);
  const res = await fetch(files('/archive', '/corrupt'), { method: 'PUT', headers: { ...auth(), 'content-type': 'application/x-tar' }, body: new Uint8Array(randomBytes(50_000)) });
  const body = (await res.json()) as any;
  isError({ status: res.status, body }, 400, 'invalid_argument', /tar could not extract .*does not look like a tar archive/);
  assert.equal((await svc.call('GET', '/v1/runtimes/dirs')).body.data.status, 'running');
  assert.equal(await sh('echo alive'), 'alive\n');
});

test('a download cut midway is a broken transfer, and an abandoned one stops tar in the guest', TIMEOUT, async () => {
  await sh('mkdir -p /big && head -c 48M /dev/urandom > /big/random.bin');
  const tars = async () => (await svc.call('POST', '/v1/runtimes/dirs/exec', { command: 'pgrep -x tar' })).body.data.stdout.trim();

  // tar killed while the archive is unread: the client's read fails, it never sees a clean end.
  let res = await fetch(files('/archive', '/big'), { headers: auth() });
  assert.equal(res.status, 200);
  let reader = res.body!.getReader();
  assert.equal((await reader.read()).done, false);
  assert.notEqual(await tars(), '', 'tar waits on its unread output');
  await sh('pkill -9 -x tar');
  await assert.rejects(async () => {
    for (;;) if ((await reader.read()).done) break;
  }, 'the transfer breaks');

  // A client that goes away: tar is killed rather than left to read the whole tree.
  const abort = new AbortController();
  res = await fetch(files('/archive', '/big'), { headers: auth(), signal: abort.signal });
  reader = res.body!.getReader();
  assert.equal((await reader.read()).done, false);
  assert.notEqual(await tars(), '');
  abort.abort();
  let left = 'tar';
  for (let i = 0; i < 50 && left !== ''; i++) {
    await new Promise((r) => setTimeout(r, 200));
    left = await tars();
  }
  assert.equal(left, '', 'no tar runs on in the guest');
  assert.equal(await sh('echo alive'), 'alive\n');
});
