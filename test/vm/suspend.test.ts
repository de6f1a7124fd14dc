/** Idle suspension: an idle runtime is saved to disk and its QEMU exits; resume brings it back whole. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fingerprint } from '../support/checkpoint-files.js';
import { COUNTER_LOOP, READ_COUNTER } from '../support/guest.js';
import { Service } from '../support/service.js';

const svc = new Service({ VESSEL_IDLE_SUSPEND_SECS: '3' });
before(() => svc.start(), { timeout: 900_000 });
after(() => svc.destroy());

const sh = async (rt: string, command: string) => {
  const r = await svc.call('POST', `/v1/runtimes/${rt}/exec`, { command });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data.stdout as string;
};

async function waitStatus(rt: string, status: string, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if ((await svc.call('GET', `/v1/runtimes/${rt}`)).body.data.status === status) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.fail(`runtime ${rt} never became ${status}`);
}

for (const [how, op] of [['resume', 'resume'], ['start', 'start']] as const) {
  test(`an idle runtime is suspended, and ${how} restores its processes, files and name`, { timeout: 300_000 }, async () => {
    const name = `idle-${how}`;
    const created = await svc.call('POST', '/v1/runtimes', { display_name: name });
    assert.equal(created.status, 201, JSON.stringify(created.body));
    await sh(name, COUNTER_LOOP);
    await sh(name, 'echo kept > /root/kept.txt');
    const system = (await svc.call('GET', '/v1/checkpoints?include_system=true')).body.data.find((c: any) => c.system);
    const systemPrint = fingerprint(svc.dataDir, system.id);
    const dir = join(svc.dataDir, 'runtimes', created.body.data.id);
    const pid = Number(readFileSync(join(dir, 'qemu.pid'), 'utf8'));
    await waitStatus(name, 'suspended', 30_000);
    assert.throws(() => process.kill(pid, 0), 'its QEMU has exited');
    const ex = await svc.call('POST', `/v1/runtimes/${name}/exec`, { command: 'true' });
    assert.equal(ex.status, 409);
    assert.equal(ex.body.error.code, 'failed_precondition');
    const r = await svc.call('POST', `/v1/runtimes/${name}/${op}`);
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.equal(r.body.data.status, 'running');
    assert.equal(await sh(name, 'cat /root/kept.txt'), 'kept\n');
    assert.equal((await sh(name, 'hostname')).trim(), name);
    const a = Number(await sh(name, READ_COUNTER));
    const b = Number(await sh(name, `sleep 0.5; ${READ_COUNTER}`));
    assert.ok(a > 0 && b > a, `the background process goes on (${a} -> ${b})`);
    assert.deepEqual(fingerprint(svc.dataDir, system.id), systemPrint, 'suspending and restoring the fork left its checkpoint as it was');
    await svc.call('DELETE', `/v1/runtimes/${name}`);
  });
}
