/** Checkpoints and forks of real VMs: running processes continue, forks diverge, files are freed. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { COUNTER_LOOP, READ_COUNTER } from '../support/guest.js';
import { seedInto, Service } from '../support/service.js';

const TIMEOUT = { timeout: 300_000 };
const svc = new Service();
before(() => svc.start(), { timeout: 900_000 });
after(() => svc.destroy());

async function sh(s: Service, rt: string, command: string): Promise<string> {
  const r = await s.call('POST', `/v1/runtimes/${rt}/exec`, { command });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data.stdout;
}

async function settle(s: Service, id: string): Promise<any> {
  for (let i = 0; i < 600; i++) {
    const cp = (await s.call('GET', `/v1/checkpoints/${id}`)).body.data;
    if (cp.state !== 'creating') return cp;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error('checkpoint never settled');
}

test('a running process continues in two forks, whose files diverge', TIMEOUT, async () => {
  assert.equal((await svc.call('POST', '/v1/runtimes', { display_name: 'src' })).status, 201);
  await sh(svc, 'src', COUNTER_LOOP);
  await sh(svc, 'src', 'sleep 0.5; echo base > /root/shared.txt; sync');
  const r = await svc.call('POST', '/v1/runtimes/src/checkpoints', { kind: 'full', name: 'snap' });
  assert.equal(r.status, 201);
  assert.equal(r.body.data.state, 'creating');
  const cp = await settle(svc, r.body.data.id);
  assert.equal(cp.state, 'ready', cp.state_message);
  assert.deepEqual(cp.resources, { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 });
  // The source is running again, unharmed.
  assert.equal((await svc.call('GET', '/v1/runtimes/src')).body.data.status, 'running');
  assert.equal(await sh(svc, 'src', 'cat /root/shared.txt'), 'base\n');

  for (const name of ['fork-1', 'fork-2']) {
    const f = await svc.call('POST', '/v1/runtimes', { display_name: name, checkpoint: 'snap' });
    assert.equal(f.status, 201, JSON.stringify(f.body));
  }
  for (const name of ['fork-1', 'fork-2']) {
    assert.equal((await sh(svc, name, 'hostname')).trim(), name);
    assert.match(await sh(svc, name, 'cat /etc/hosts'), new RegExp(`^127\\.0\\.1\\.1 ${name}$`, 'm'));
    const a = Number(await sh(svc, name, READ_COUNTER));
    const b = Number(await sh(svc, name, `sleep 1; ${READ_COUNTER}`));
    assert.ok(a > 0 && b > a, `${name}: the counter goes on (${a} -> ${b})`);
    assert.equal(await sh(svc, name, 'cat /root/shared.txt'), 'base\n');
    await sh(svc, name, `echo ${name} > /root/shared.txt`);
  }
  assert.equal(await sh(svc, 'fork-1', 'cat /root/shared.txt'), 'fork-1\n');
  assert.equal(await sh(svc, 'fork-2', 'cat /root/shared.txt'), 'fork-2\n');
  assert.equal(await sh(svc, 'src', 'cat /root/shared.txt'), 'base\n');
  // The guest clock was set on restore.
  const guestNow = Number(await sh(svc, 'fork-1', 'date +%s'));
  assert.ok(Math.abs(guestNow - Date.now() / 1000) < 30, 'fork clock is current');
});

test('forks of a quiet runtime draw their own random bytes', TIMEOUT, async () => {
  // Nothing runs in this source, so its forks replay exactly what it would do next: only the
  // kernel generator's reseed on restore tells their bytes apart. Reading it just before the
  // checkpoint leaves it freshly keyed, and it would otherwise not rekey for a minute.
  const RANDOM = 'head -c 16 /dev/urandom | od -An -tx1';
  assert.equal((await svc.call('POST', '/v1/runtimes', { display_name: 'quiet' })).status, 201);
  const seen = [await sh(svc, 'quiet', RANDOM)];
  const cp = await settle(svc, (await svc.call('POST', '/v1/runtimes/quiet/checkpoints', {})).body.data.id);
  assert.equal(cp.state, 'ready', cp.state_message);
  for (const name of ['quiet-1', 'quiet-2']) {
    assert.equal((await svc.call('POST', '/v1/runtimes', { display_name: name, checkpoint: cp.id })).status, 201);
    seen.push(await sh(svc, name, RANDOM));
  }
  assert.equal(new Set(seen).size, 3, `the same bytes twice: ${seen.join(' | ')}`);
  for (const name of ['quiet', 'quiet-1', 'quiet-2']) assert.equal((await svc.call('DELETE', `/v1/runtimes/${name}`)).status, 200);
  assert.equal((await svc.call('DELETE', `/v1/checkpoints/${cp.id}`)).status, 200);
});

test('a paused runtime can be checkpointed and stays paused', TIMEOUT, async () => {
  assert.equal((await svc.call('POST', '/v1/runtimes/src/pause')).status, 200);
  const r = await svc.call('POST', '/v1/runtimes/src/checkpoints', { name: 'paused-snap' });
  const cp = await settle(svc, r.body.data.id);
  assert.equal(cp.state, 'ready', cp.state_message);
  assert.equal((await svc.call('GET', '/v1/runtimes/src')).body.data.status, 'paused');
  assert.equal((await svc.call('POST', '/v1/runtimes/src/resume')).body.data.status, 'running');
  assert.equal(await sh(svc, 'src', 'echo ok'), 'ok\n');
  // And a second checkpoint of the same runtime stacks a layer on the first.
  const again = await settle(svc, (await svc.call('POST', '/v1/runtimes/src/checkpoints', {})).body.data.id);
  assert.equal(again.state, 'ready', again.state_message);
  const fork = await svc.call('POST', '/v1/runtimes', { display_name: 'fork-3', checkpoint: again.id });
  assert.equal(fork.status, 201, JSON.stringify(fork.body));
  assert.equal(await sh(svc, 'fork-3', 'cat /root/shared.txt'), 'base\n');
});

test('deleting a checkpoint hides it at once; its layer lives while something sits on it', TIMEOUT, async () => {
  const cp = (await svc.call('GET', '/v1/checkpoints/snap')).body.data;
  const cpDir = join(svc.dataDir, 'checkpoints', cp.id);
  const layer = join(svc.dataDir, 'layers', `${cp.id}.qcow2`);
  assert.ok(existsSync(cpDir) && existsSync(layer));
  assert.equal((await svc.call('DELETE', '/v1/checkpoints/snap')).status, 200);
  assert.equal((await svc.call('GET', '/v1/checkpoints/snap')).status, 404);
  assert.ok(!(await svc.call('GET', '/v1/checkpoints')).body.data.some((c: any) => c.id === cp.id));
  assert.equal((await svc.call('POST', '/v1/runtimes', { display_name: 'late-fork', checkpoint: cp.id })).status, 404);
  // Memory and device state are only read at restore: they go at once. The disk layer stays.
  assert.equal(existsSync(cpDir), false);
  assert.ok(existsSync(layer), 'the forks and the source sit on the layer');
  assert.equal(await sh(svc, 'fork-1', 'cat /root/shared.txt'), 'fork-1\n');
  await svc.call('DELETE', '/v1/runtimes/fork-1');
  await svc.call('DELETE', '/v1/runtimes/fork-2');
  assert.ok(existsSync(layer), 'the source still sits on it');
});

test('system checkpoints are listed only with include_system and cannot be deleted', TIMEOUT, async () => {
  const plain = (await svc.call('GET', '/v1/checkpoints')).body.data;
  assert.ok(plain.every((c: any) => c.system === false));
  const all = (await svc.call('GET', '/v1/checkpoints?include_system=true')).body.data;
  const sys = all.find((c: any) => c.system);
  assert.ok(sys, 'a system checkpoint exists');
  assert.match(sys.display_name, /^system-[0-9a-f]+-[0-9a-f]+-512m-1c$/);
  const del = await svc.call('DELETE', `/v1/checkpoints/${sys.id}`);
  assert.equal(del.status, 409);
  assert.equal(del.body.error.code, 'failed_precondition');
});

test('kill -9 during a capture leaves nothing half-made', TIMEOUT, async () => {
  const r = await svc.call('POST', '/v1/runtimes/src/checkpoints', { name: 'interrupted' });
  assert.equal(r.status, 201);
  await svc.kill9();
  await svc.start();
  const cp = await settle(svc, r.body.data.id);
  assert.ok(cp.state === 'failed' || cp.state === 'ready', cp.state);
  if (cp.state === 'failed') assert.equal(existsSync(join(svc.dataDir, 'checkpoints', cp.id)), false);
  const rt = (await svc.call('GET', '/v1/runtimes/src')).body.data;
  assert.equal(rt.status, 'running');
  assert.equal(await sh(svc, 'src', 'cat /root/shared.txt'), 'base\n');
  const n1 = Number(await sh(svc, 'src', READ_COUNTER));
  const n2 = Number(await sh(svc, 'src', `sleep 0.5; ${READ_COUNTER}`));
  assert.ok(n2 > n1, 'the source runs again');
});

test('a checkpoint that fails on a full disk is failed, and the runtime is unharmed', { timeout: 600_000 }, async () => {
  const mnt = mkdtempSync(join(tmpdir(), 'vessel-full-'));
  const img = `${mnt}.img`;
  execFileSync('truncate', ['-s', '1200M', img]);
  execFileSync('mkfs.ext4', ['-q', '-F', img]);
  execFileSync('mount', ['-o', 'loop', img, mnt]);
  // The system template comes from the run's seed, as every other service's does: what fills this
  // disk is the test's own checkpoint.
  seedInto(join(mnt, 'data'));
  const small = new Service({}, join(mnt, 'data'));
  try {
    await small.start();
    assert.equal((await small.call('POST', '/v1/runtimes', { display_name: 'victim' })).status, 201);
    await sh(small, 'victim', 'echo precious > /root/p.txt; sync');
    // Leave about a megabyte: enough for the disk switch, not for the memory stream.
    const free = Number(execFileSync('df', ['--output=avail', '-B1', mnt]).toString().split('\n')[1]);
    execFileSync('fallocate', ['-l', String(free - 1024 * 1024), join(mnt, 'filler')]);
    const r = await small.call('POST', '/v1/runtimes/victim/checkpoints', { name: 'too-big' });
    assert.equal(r.status, 201);
    const cp = await settle(small, r.body.data.id);
    assert.equal(cp.state, 'failed');
    assert.ok(cp.state_message.length > 0);
    rmSync(join(mnt, 'filler'));
    assert.equal((await small.call('GET', '/v1/runtimes/victim')).body.data.status, 'running');
    assert.equal(await sh(small, 'victim', 'cat /root/p.txt'), 'precious\n');
    await sh(small, 'victim', 'echo after > /root/after.txt; sync');
    assert.equal(await sh(small, 'victim', 'cat /root/after.txt'), 'after\n');
    assert.deepEqual(readdirSync(join(mnt, 'data', 'checkpoints')).filter((d) => d === cp.id), []);
  } catch (err) {
    console.error(small.log);
    throw err;
  } finally {
    await small.destroy().catch(() => undefined);
    execFileSync('umount', ['-l', mnt]);
    rmSync(img, { force: true });
    rmSync(mnt, { recursive: true, force: true });
  }
});

test('deleting everything frees every layer but the system templates', TIMEOUT, async () => {
  for (const rt of (await svc.call('GET', '/v1/runtimes')).body.data) await svc.call('DELETE', `/v1/runtimes/${rt.id}`);
  for (const cp of (await svc.call('GET', '/v1/checkpoints')).body.data) assert.equal((await svc.call('DELETE', `/v1/checkpoints/${cp.id}`)).status, 200);
  // Each layer keeps the digest recorded when it was frozen beside it.
  const system = (await svc.call('GET', '/v1/checkpoints?include_system=true')).body.data.flatMap((c: any) => [`${c.id}.digest`, `${c.id}.qcow2`]);
  assert.deepEqual(readdirSync(join(svc.dataDir, 'layers')).sort(), system.sort());
  // Only the warm pool's spares remain, and they sit on system layers alone.
  const left = readdirSync(join(svc.dataDir, 'runtimes')).filter((d) => !existsSync(join(svc.dataDir, 'runtimes', d, 'spare')));
  assert.deepEqual(left, []);
});
