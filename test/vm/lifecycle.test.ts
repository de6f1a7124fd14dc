/**
 * Per-runtime lifecycle settings on real VMs: an idle runtime is stopped or suspended as its
 * settings say (never while a command runs), and one with auto_delete is deleted, files and all,
 * once it has been stopped that long. Every wait is for a condition, under a generous deadline.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Service } from '../support/service.js';

// No service-wide idle timeout: only the runtimes' own settings act.
const svc = new Service({});
before(() => svc.start(), { timeout: 900_000 });
after(() => svc.destroy());

async function until<T>(what: string, probe: () => Promise<T | undefined>, ms = 120_000): Promise<T> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((r) => setTimeout(r, 250));
  }
  assert.fail(`timed out waiting until ${what}`);
}

const runtime = async (name: string) => (await svc.call('GET', `/v1/runtimes/${name}`)).body.data;
const statusIs = (name: string, status: string) => until(`${name} is ${status}`, async () => ((await runtime(name))?.status === status ? runtime(name) : undefined));

async function create(name: string, lifecycle: object): Promise<{ id: string; pid: number }> {
  const r = await svc.call('POST', '/v1/runtimes', { display_name: name, lifecycle });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  const pid = Number(readFileSync(join(svc.dataDir, 'runtimes', r.body.data.id, 'qemu.pid'), 'utf8'));
  return { id: r.body.data.id, pid };
}

const exited = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
};

test('idle_timeout_secs with on_idle stop: a command longer than the timeout runs to its end, then the idle runtime is shut down', { timeout: 300_000 }, async () => {
  const { pid } = await create('idle-stop', { idle_timeout_secs: 4, on_idle: 'stop' });
  const ex = await svc.call('POST', '/v1/runtimes/idle-stop/exec', { command: 'sleep 8; echo done' });
  assert.equal(ex.status, 200, JSON.stringify(ex.body));
  assert.equal(ex.body.data.stdout, 'done\n', 'the runtime was not stopped under a running command');
  const stopped = await statusIs('idle-stop', 'shutdown');
  assert.match(stopped.status_message, /stopped after 4 s without activity/);
  await until('its QEMU has exited', async () => (exited(pid) ? true : undefined));
  const started = await svc.call('POST', '/v1/runtimes/idle-stop/start');
  assert.equal(started.status, 200, JSON.stringify(started.body));
  assert.equal(started.body.data.status, 'running');
  await svc.call('DELETE', '/v1/runtimes/idle-stop');
});

test('idle_timeout_secs with on_idle suspend: the idle runtime is saved to disk, and resume brings back its files', { timeout: 300_000 }, async () => {
  const { pid } = await create('idle-suspend', { idle_timeout_secs: 3 });
  const wrote = await svc.call('POST', '/v1/runtimes/idle-suspend/exec', { command: 'echo kept > /root/kept.txt' });
  assert.equal(wrote.status, 200, JSON.stringify(wrote.body));
  const suspended = await statusIs('idle-suspend', 'suspended');
  assert.match(suspended.status_message, /suspended after 3 s without activity/);
  await until('its QEMU has exited', async () => (exited(pid) ? true : undefined));
  assert.equal((await svc.call('POST', '/v1/runtimes/idle-suspend/resume')).status, 200);
  const read = await svc.call('POST', '/v1/runtimes/idle-suspend/exec', { command: 'cat /root/kept.txt' });
  assert.equal(read.body.data.stdout, 'kept\n');
  await svc.call('DELETE', '/v1/runtimes/idle-suspend');
});

test('auto_delete_secs: a stopped runtime is deleted with its files once stopped that long', { timeout: 300_000 }, async () => {
  const { id } = await create('short-lived', { auto_delete_secs: 2, idle_timeout_secs: 0 });
  const dir = join(svc.dataDir, 'runtimes', id);
  assert.ok(existsSync(dir));
  assert.equal((await svc.call('POST', '/v1/runtimes/short-lived/stop')).status, 200);
  await until('the runtime is gone', async () => ((await svc.call('GET', `/v1/runtimes/${id}`)).status === 404 ? true : undefined));
  assert.equal(existsSync(dir), false, 'its disk went with it');
  const audit = await until('the delete is audited', async () => (await svc.call('GET', `/v1/audits?category=lifecycle&runtime=${id}`)).body.data[0]);
  assert.deepEqual(audit.payload.lifecycle, { action: 'delete', reason: 'deleted 2 s after it stopped running (lifecycle.auto_delete_secs)', runtime_name: 'short-lived' });
});
