/**
 * Real VMs through the real service: lifecycle, exec, files, resources, isolation, and a
 * service killed with -9 in the middle. VMs are reused across cases wherever the case allows.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { Service } from '../support/service.js';
import { hostMemoryLimitMib } from '../../src/vm/qemu-driver.js';

// A tenant quota must not answer before the host does, whatever this machine's size.
const svc = new Service({ VESSEL_TENANT_MAX_MEMORY_MIB: String(1 << 30) });
const TIMEOUT = { timeout: 300_000 };

before(async () => {
  await svc.start();
}, { timeout: 900_000 });
after(() => svc.destroy());

const exec = async (rt: string, body: object) => svc.call('POST', `/v1/runtimes/${rt}/exec`, body);
const out = async (rt: string, command: string) => {
  const r = await exec(rt, { command });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data.stdout as string;
};

async function putFile(rt: string, path: string, data: Buffer): Promise<Response> {
  return fetch(`${svc.url}/v1/runtimes/${rt}/files?path=${encodeURIComponent(path)}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/octet-stream' },
    body: new Uint8Array(data),
  });
}
async function getFile(rt: string, path: string): Promise<Response> {
  return fetch(`${svc.url}/v1/runtimes/${rt}/files?path=${encodeURIComponent(path)}`, { headers: { authorization: `Bearer ${svc.token}` } });
}

test('create boots a VM whose agent answers', TIMEOUT, async () => {
  const r = await svc.call('POST', '/v1/runtimes', { display_name: 'vm-a', resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  assert.equal(r.body.data.status, 'running');
  assert.equal((await out('vm-a', 'hostname')).trim(), 'vm-a');
  assert.match(await out('vm-a', 'cat /proc/cpuinfo | grep -c ^processor'), /^1\n$/);
});

test('exec: shell form, argv form, env, cwd, stdin, exit codes', TIMEOUT, async () => {
  let r = await exec('vm-a', { command: 'echo "$GREETING from $(pwd)"; echo oops >&2; exit 7', env: { GREETING: 'hi' }, cwd: '/tmp' });
  assert.equal(r.status, 200);
  assert.equal(r.body.data.exit_code, 7);
  assert.equal(r.body.data.stdout, 'hi from /tmp\n');
  assert.equal(r.body.data.stderr, 'oops\n');
  assert.equal(r.body.data.stdout_truncated, false);
  assert.ok(Number.isInteger(r.body.data.duration_ms) && r.body.data.duration_ms >= 0);
  // argv form: no shell, so the $ is literal
  r = await exec('vm-a', { command: 'echo', args: ['$HOME', 'a b'] });
  assert.equal(r.body.data.stdout, '$HOME a b\n');
  r = await exec('vm-a', { command: 'cat', args: ['-'], stdin: 'from stdin ✓' });
  assert.equal(r.body.data.stdout, 'from stdin ✓');
  r = await exec('vm-a', { command: 'nonexistent-binary-xyz', args: ['1'] });
  assert.equal(r.status, 422);
  assert.equal(r.body.error.code, 'command_failed');
  r = await exec('vm-a', { command: 'ls', cwd: '/does/not/exist' });
  assert.equal(r.status, 422);
  assert.equal(r.body.error.code, 'command_failed');
  r = await exec('vm-a', { command: 'nonexistent-binary-xyz' });
  assert.equal(r.status, 200, 'the shell started; it reports 127 itself');
  assert.equal(r.body.data.exit_code, 127);
});

test('exec: output caps are honest and decoding is lossy UTF-8', TIMEOUT, async () => {
  let r = await exec('vm-a', { command: 'head -c 1000 /dev/zero | tr "\\0" x', max_output_bytes: 1000 });
  assert.equal(r.body.data.stdout.length, 1000);
  assert.equal(r.body.data.stdout_truncated, false);
  r = await exec('vm-a', { command: 'head -c 1001 /dev/zero | tr "\\0" x; head -c 5 /dev/zero >&2', max_output_bytes: 1000 });
  assert.equal(r.body.data.stdout.length, 1000);
  assert.equal(r.body.data.stdout_truncated, true);
  assert.equal(r.body.data.stderr_truncated, false);
  r = await exec('vm-a', { command: "printf 'ok\\377\\376end'" });
  assert.equal(r.body.data.stdout, 'ok\ufffd\ufffdend');
  r = await exec('vm-a', { command: 'head -c 3000000 /dev/zero' });
  assert.equal(r.body.data.stdout.length, 1024 * 1024, 'default cap is 1 MiB');
  assert.equal(r.body.data.stdout_truncated, true);
});

test('exec: the largest reply the agent can send (16 MiB per stream) comes back capped while the service goes on answering', TIMEOUT, async () => {
  let answered = 0;
  let done = false;
  const big = exec('vm-a', { command: 'head -c 16M /dev/zero | tr "\\0" a; head -c 16M /dev/zero | tr "\\0" b >&2', max_output_bytes: 4194304, timeout_secs: 120 }).finally(() => (done = true));
  while (!done) {
    if ((await fetch(`${svc.url}/healthz`)).ok) answered++;
    await new Promise((r) => setTimeout(r, 50));
  }
  const r = await big;
  assert.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
  assert.equal(r.body.data.stdout.length, 4194304);
  assert.equal(r.body.data.stderr.length, 4194304);
  assert.ok(r.body.data.stdout_truncated && r.body.data.stderr_truncated);
  assert.match(r.body.data.stdout, /^a+$/);
  assert.ok(answered > 0, 'health checks were answered while the reply was read');
  assert.equal(await out('vm-a', 'echo still'), 'still\n');
});

test('exec: timeout kills the whole process tree', TIMEOUT, async () => {
  const started = Date.now();
  const r = await exec('vm-a', { command: 'sleep 300 & (sleep 301 &) ; sleep 302', timeout_secs: 2 });
  assert.equal(r.status, 504);
  assert.equal(r.body.error.code, 'deadline_exceeded');
  assert.ok(Date.now() - started < 30_000);
  const left = await out('vm-a', 'ps -eo cmd | grep -c "^sleep 30[02]" || true');
  assert.equal(left.trim(), '0');
  // the agent survived the kill
  assert.equal(await out('vm-a', 'echo alive'), 'alive\n');
});

test('exec: many at once in one runtime', TIMEOUT, async () => {
  const results = await Promise.all(Array.from({ length: 10 }, (_, i) => exec('vm-a', { command: `sleep 0.$i; echo ${i}` })));
  results.forEach((r, i) => {
    assert.equal(r.status, 200);
    assert.equal(r.body.data.stdout, `${i}\n`);
  });
});

test('files: 10 MiB binary round trip, parents created, errors', TIMEOUT, async () => {
  const data = randomBytes(10 * 1024 * 1024);
  const put = await putFile('vm-a', '/data/deep/dir/blob.bin', data);
  assert.equal(put.status, 200);
  assert.deepEqual(await put.json(), { data: { path: '/data/deep/dir/blob.bin', size_bytes: data.length } });
  const sum = await out('vm-a', 'sha256sum /data/deep/dir/blob.bin | cut -d" " -f1');
  assert.equal(sum.trim(), createHash('sha256').update(data).digest('hex'));
  const got = await getFile('vm-a', '/data/deep/dir/blob.bin');
  assert.equal(got.status, 200);
  assert.equal(got.headers.get('content-type'), 'application/octet-stream');
  assert.ok(Buffer.from(await got.arrayBuffer()).equals(data));
  const empty = await putFile('vm-a', '/tmp/empty', Buffer.alloc(0));
  assert.equal(empty.status, 200);
  assert.equal((await getFile('vm-a', '/tmp/empty')).status, 200);
  assert.equal((await getFile('vm-a', '/data/deep')).status, 400);
  assert.equal((await getFile('vm-a', '/no/such/file')).status, 404);
  assert.equal((await getFile('vm-a', 'relative/path')).status, 400);
  assert.equal((await putFile('vm-a', '/data/deep', Buffer.from('x'))).status, 400);
});

test('PATCH requests.memory_mib applies live through the balloon', TIMEOUT, async () => {
  // With deflate-on-oom the balloon's pages still count in MemTotal; MemAvailable shows them gone.
  const available = async () => Number((await out('vm-a', "awk '/MemAvailable/ {print $2}' /proc/meminfo")).trim());
  const before = await available();
  const r = await svc.call('PATCH', '/v1/runtimes/vm-a', { resources: { requests: { memory_mib: 256 } } });
  assert.equal(r.status, 200);
  assert.equal(r.body.data.resources.requests.memory_mib, 256);
  let after = before;
  for (let i = 0; i < 100 && after > 256 * 1024; i++) {
    await new Promise((res) => setTimeout(res, 200));
    after = await available();
  }
  assert.ok(after <= 256 * 1024, `MemAvailable ${before} -> ${after} kB`);
  await svc.call('PATCH', '/v1/runtimes/vm-a', { resources: { requests: { memory_mib: 512 } } });
});

test('lifecycle: pause, resume, stop, start keeps the disk', TIMEOUT, async () => {
  await out('vm-a', 'echo persisted > /root/keep.txt; sync');
  let r = await svc.call('POST', '/v1/runtimes/vm-a/pause');
  assert.equal(r.body.data.status, 'paused');
  r = await exec('vm-a', { command: 'true' });
  assert.equal(r.status, 409);
  // A paused guest's clock stands still; resume sets it, or the guest would be this far behind.
  const PAUSE_SECS = 8;
  await new Promise((resolve) => setTimeout(resolve, PAUSE_SECS * 1000));
  assert.equal((await svc.call('POST', '/v1/runtimes/vm-a/resume')).body.data.status, 'running');
  assert.equal(await out('vm-a', 'echo back'), 'back\n');
  const skew = Number(await out('vm-a', 'date +%s.%N')) - Date.now() / 1000;
  assert.ok(Math.abs(skew) < PAUSE_SECS / 2, `guest clock off by ${skew.toFixed(2)} s after a ${PAUSE_SECS} s pause`);
  r = await svc.call('POST', '/v1/runtimes/vm-a/stop');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.data.status, 'shutdown');
  assert.equal((await exec('vm-a', { command: 'true' })).status, 409);
  r = await svc.call('POST', '/v1/runtimes/vm-a/start');
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.equal(r.body.data.status, 'running');
  assert.equal(await out('vm-a', 'cat /root/keep.txt'), 'persisted\n');
});

test('concurrent lifecycle calls on one runtime are serialized', TIMEOUT, async () => {
  const [p1, p2] = await Promise.all([svc.call('POST', '/v1/runtimes/vm-a/pause'), svc.call('POST', '/v1/runtimes/vm-a/pause')]);
  assert.deepEqual([p1.status, p2.status].sort(), [200, 409]);
  assert.equal((await svc.call('POST', '/v1/runtimes/vm-a/resume')).status, 200);
});

test('two runtimes are isolated from each other', TIMEOUT, async () => {
  const r = await svc.call('POST', '/v1/runtimes', { display_name: 'vm-b' });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  await out('vm-a', 'echo only-a > /root/mine');
  assert.equal((await exec('vm-b', { command: 'cat /root/mine' })).body.data.exit_code, 1);
  assert.equal((await out('vm-b', 'hostname')).trim(), 'vm-b');
  const ps = await exec('vm-b', { command: 'ls /dev/vd* && ip -o link | wc -l' });
  assert.equal(ps.body.data.stdout, '/dev/vda\n2\n', 'one disk of its own; loopback and its own NIC');
  // Every VM has the same address on a link of its own: the other one is not even addressable,
  // and whatever vm-b sends goes to the gateway, which denies it (no egress allowed by default).
  const probe = await exec('vm-b', { command: "curl -s -m 5 -o /dev/null -w '%{http_code}' http://10.222.0.1:8000/" });
  assert.equal(probe.body.data.stdout, '403', 'the gateway answered, not another VM');
});

test('capacity: more memory than the host has is invalid, more than it has free is unavailable, and neither leaves anything', TIMEOUT, async () => {
  const impossible = await svc.call('POST', '/v1/runtimes', { display_name: 'too-big', resources: { limits: { memory_mib: 64 * 1024 * 1024 } } });
  assert.equal(impossible.status, 400, JSON.stringify(impossible.body));
  assert.equal(impossible.body.error.code, 'invalid_argument');
  assert.equal((await svc.call('GET', '/v1/runtimes/too-big')).status, 404);
  // The whole host is a valid size, but never free while anything else runs on it.
  const busy = await svc.call('POST', '/v1/runtimes', { display_name: 'too-big', resources: { limits: { memory_mib: hostMemoryLimitMib() } } });
  assert.equal(busy.status, 503, JSON.stringify(busy.body));
  assert.equal(busy.body.error.code, 'unavailable');
  assert.equal((await svc.call('GET', '/v1/runtimes/too-big')).status, 404);
});

test('kill -9 of the service: both runtimes are adopted and still run', TIMEOUT, async () => {
  await svc.call('POST', '/v1/secrets', { name: 'survivor', value: 'v-123' });
  const runtimesDir = join(svc.dataDir, 'runtimes');
  const spares = () => readdirSync(runtimesDir).filter((d) => existsSync(join(runtimesDir, d, 'spare')));
  const sparesBefore = spares();
  assert.ok(sparesBefore.length > 0, 'the warm pool holds spares');
  const sparePids = sparesBefore.map((d) => Number(readFileSync(join(runtimesDir, d, 'qemu.pid'), 'utf8')));
  await svc.kill9();
  await svc.start();
  for (const d of sparesBefore) assert.ok(!existsSync(join(runtimesDir, d)), 'a spare of the dead service is swept');
  for (const pid of sparePids) assert.throws(() => process.kill(pid, 0), 'and its QEMU is gone');
  for (const rt of ['vm-a', 'vm-b']) {
    const r = await svc.call('GET', `/v1/runtimes/${rt}`);
    assert.equal(r.body.data.status, 'running');
    assert.equal((await out(rt, 'hostname')).trim(), rt);
  }
  assert.equal(await out('vm-a', 'cat /root/mine'), 'only-a\n');
  assert.equal((await svc.call('GET', '/v1/secrets/survivor')).status, 200);
});

test('a QEMU killed behind our back becomes crashed; delete cleans up', TIMEOUT, async () => {
  const rt = (await svc.call('GET', '/v1/runtimes/vm-b')).body.data;
  const dir = join(svc.dataDir, 'runtimes', rt.id);
  const pid = Number(readFileSync(join(dir, 'qemu.pid'), 'utf8'));
  process.kill(pid, 'SIGKILL');
  const t0 = Date.now();
  let status = 'running';
  while (status !== 'crashed' && Date.now() - t0 < 10_000) {
    await new Promise((r) => setTimeout(r, 100));
    status = (await svc.call('GET', '/v1/runtimes/vm-b')).body.data.status;
  }
  assert.equal(status, 'crashed');
  assert.equal((await exec('vm-b', { command: 'true' })).status, 409);
  assert.equal((await svc.call('DELETE', '/v1/runtimes/vm-b')).status, 200);
  assert.equal(existsSync(dir), false);
  assert.equal((await svc.call('GET', '/v1/runtimes/vm-b')).status, 404);
});

test('delete from running removes the VM and its disk', TIMEOUT, async () => {
  const rt = (await svc.call('GET', '/v1/runtimes/vm-a')).body.data;
  const dir = join(svc.dataDir, 'runtimes', rt.id);
  const pid = Number(readFileSync(join(dir, 'qemu.pid'), 'utf8'));
  assert.equal((await svc.call('DELETE', '/v1/runtimes/vm-a')).status, 200);
  assert.equal(existsSync(dir), false);
  assert.throws(() => process.kill(pid, 0));
});
