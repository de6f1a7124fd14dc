/**
 * Per-tenant quotas: runtimes, vCPUs and memory of the VMs a tenant holds, checkpoints and their
 * disk space. Each harness has small defaults; overrides are kept in the store.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { TenantLimits } from '../../src/core/types.js';
import { TenantQuotas } from '../../src/core/quotas.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';

const SMALL: TenantLimits = { runtimes: 3, vcpus: 4, memoryMib: 2048, checkpoints: 2, checkpointGib: 1, templates: 2, templateGib: 1 };

async function withHarness(limits: TenantLimits, work: (h: ApiHarness, driver: FakeDriver) => Promise<void>): Promise<void> {
  const driver = new FakeDriver();
  const h = await apiHarness({ driver, tenantLimits: limits });
  try {
    await work(h, driver);
  } finally {
    await h.close();
  }
}

function overQuota(r: { status: number; body: any; headers: Record<string, unknown> }, message: RegExp): void {
  assert.equal(r.status, 409, JSON.stringify(r.body));
  assert.equal(r.body.error.code, 'failed_precondition');
  assert.match(r.body.error.message, message);
  assert.equal(r.headers['retry-after'], undefined, 'a quota is not a rate: waiting does not help');
}

const create = (h: ApiHarness, token: string, name: string, resources?: object) =>
  h.call('POST', '/v1/runtimes', { display_name: name, ...(resources === undefined ? {} : { resources }) }, token);

test('runtimes: a tenant may have its limit of runtimes, in any state; other tenants are not affected', async () => {
  await withHarness(SMALL, async (h) => {
    const acme = await h.token('acme', ['admin']);
    const bob = await h.token('bob', ['admin']);
    for (const name of ['a1', 'a2', 'a3']) assert.equal((await create(h, acme, name)).status, 201);
    await h.call('POST', '/v1/runtimes/a1/stop', undefined, acme);
    overQuota(await create(h, acme, 'a4'), /^tenant 'acme' has 3 runtimes, its limit$/);
    assert.equal((await h.call('GET', '/v1/runtimes/a4', undefined, acme)).status, 404, 'nothing was made');
    assert.equal((await create(h, bob, 'b1')).status, 201, 'another tenant has its own quota');
    await h.call('DELETE', '/v1/runtimes/a1', undefined, acme);
    assert.equal((await create(h, acme, 'a4')).status, 201, 'a delete frees a slot');
  });
});

test('memory and vCPUs count the limits of runtimes that hold a VM; start and resume hold one again', async () => {
  await withHarness(SMALL, async (h) => {
    const t = await h.token('mem', ['admin']);
    assert.equal((await create(h, t, 'big', { limits: { memory_mib: 1536 } })).status, 201);
    overQuota(
      await create(h, t, 'more', { limits: { memory_mib: 1024 } }),
      /^tenant 'mem' holds 1536 MiB of memory limits in runtimes with a VM; runtime 'more' needs 1024 MiB more, past its limit of 2048 MiB$/,
    );
    overQuota(await create(h, t, 'wide', { vcpus: 4 }), /^tenant 'mem' holds 1 vCPU in runtimes with a VM; runtime 'wide' needs 4 more, past its limit of 4$/);
    await h.call('POST', '/v1/runtimes/big/pause', undefined, t);
    overQuota(await create(h, t, 'more', { limits: { memory_mib: 1024 } }), /holds 1536 MiB/);
    await h.call('POST', '/v1/runtimes/big/stop', undefined, t);
    assert.equal((await create(h, t, 'more', { limits: { memory_mib: 1024 } })).status, 201, 'a stopped runtime holds no VM');
    overQuota(await h.call('POST', '/v1/runtimes/big/start', undefined, t), /^tenant 'mem' holds 1024 MiB .* runtime 'big' needs 1536 MiB more/);
    assert.equal((await h.call('GET', '/v1/runtimes/big', undefined, t)).body.data.status, 'shutdown', 'a refused start changes nothing');
    await h.call('POST', '/v1/runtimes/more/stop', undefined, t);
    assert.equal((await h.call('POST', '/v1/runtimes/big/start', undefined, t)).status, 200);

    // A suspended runtime holds no VM either; resume asks for one again.
    const big = await h.store.runtimes.find('mem', 'big');
    await h.store.runtimes.update({ ...big!, status: 'suspended' });
    assert.equal((await h.call('POST', '/v1/runtimes/more/start', undefined, t)).status, 200);
    overQuota(await h.call('POST', '/v1/runtimes/big/resume', undefined, t), /runtime 'big' needs 1536 MiB more/);
  });
});

test('a PATCH that raises a memory limit must fit beside the VMs the tenant holds; lowering always works', async () => {
  await withHarness(SMALL, async (h) => {
    const t = await h.token('grow', ['admin']);
    await create(h, t, 'g1', { limits: { memory_mib: 1024 } });
    await create(h, t, 'g2', { limits: { memory_mib: 1024 } });
    overQuota(
      await h.call('PATCH', '/v1/runtimes/g1', { resources: { limits: { memory_mib: 1536 } } }, t),
      /^tenant 'grow' holds 2048 MiB of memory limits in runtimes with a VM; runtime 'g1' needs 512 MiB more, past its limit of 2048 MiB$/,
    );
    const lowered = await h.call('PATCH', '/v1/runtimes/g1', { resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 512 } } }, t);
    assert.equal(lowered.status, 200);
    assert.equal(lowered.body.data.pending_resources.limits.memory_mib, 512);
    await h.call('POST', '/v1/runtimes/g1/stop', undefined, t);
    // Stopped, it holds nothing: the new limit must fit beside what the others hold.
    overQuota(await h.call('PATCH', '/v1/runtimes/g1', { resources: { limits: { memory_mib: 1536 } } }, t), /runtime 'g1' needs 1536 MiB more/);
    assert.equal((await h.call('PATCH', '/v1/runtimes/g1', { resources: { limits: { memory_mib: 1024 } } }, t)).status, 200);
  });
});

test('checkpoints: a count of non-deleted ones, and the disk space of ready ones', async () => {
  await withHarness({ ...SMALL, checkpoints: 3 }, async (h, driver) => {
    const t = await h.token('cp', ['admin']);
    await create(h, t, 'src');
    driver.checkpointBytes = 600 * 1024 * 1024;
    assert.equal((await h.call('POST', '/v1/runtimes/src/checkpoints', { name: 'c1' }, t)).status, 201);
    await h.core.checkpoints.settled();
    assert.equal((await h.call('POST', '/v1/runtimes/src/checkpoints', { name: 'c2' }, t)).status, 201);
    await h.core.checkpoints.settled();
    overQuota(await h.call('POST', '/v1/runtimes/src/checkpoints', { name: 'c3' }, t), /^tenant 'cp' has 1\.17 GiB in checkpoints, at or past its limit of 1 GiB$/);
    // c2's layer goes once nothing stands on it (the test below keeps src and finds it counted).
    await h.call('DELETE', '/v1/checkpoints/c2', undefined, t);
    await h.call('DELETE', '/v1/runtimes/src', undefined, t);
    await create(h, t, 'src2');
    driver.failNextCheckpoint = true;
    assert.equal((await h.call('POST', '/v1/runtimes/src2/checkpoints', { name: 'failed' }, t)).status, 201);
    await h.core.checkpoints.settled();
    assert.equal((await h.call('POST', '/v1/runtimes/src2/checkpoints', { name: 'c3' }, t)).status, 201);
    await h.core.checkpoints.settled();
    overQuota(await h.call('POST', '/v1/runtimes/src2/checkpoints', { name: 'c4' }, t), /^tenant 'cp' has 3 checkpoints, its limit$/);
  });
});

test('a deleted checkpoint whose layer its runtime still stands on keeps counting until the runtime goes', async () => {
  await withHarness({ ...SMALL, checkpoints: 10 }, async (h, driver) => {
    const t = await h.token('churn', ['admin']);
    await create(h, t, 'src');
    driver.checkpointBytes = 600 * 1024 * 1024;
    // Write, checkpoint, delete: the checkpoint's size is gone from the count, its layer is not.
    for (const name of ['c1', 'c2']) {
      assert.equal((await h.call('POST', '/v1/runtimes/src/checkpoints', { name }, t)).status, 201);
      await h.core.checkpoints.settled();
      assert.equal((await h.call('DELETE', `/v1/checkpoints/${name}`, undefined, t)).status, 200);
    }
    overQuota(
      await h.call('POST', '/v1/runtimes/src/checkpoints', { name: 'c3' }, t),
      /^tenant 'churn' has 1\.17 GiB in checkpoints \(1\.17 GiB of it in disk layers of deleted checkpoints its runtimes or checkpoints still stand on\), at or past its limit of 1 GiB$/,
    );
    assert.equal((await h.call('DELETE', '/v1/runtimes/src', undefined, t)).status, 200);
    await create(h, t, 'next');
    assert.equal((await h.call('POST', '/v1/runtimes/next/checkpoints', { name: 'c3' }, t)).status, 201, 'the layers went with their runtime');
  });
});

test('concurrent requests of one tenant never pass the last slot together', async () => {
  await withHarness(SMALL, async (h, driver) => {
    const t = await h.token('race', ['admin']);
    // Slow boots widen the window between a check and the VM it admits.
    driver.delayMs = 20;
    const creates = await Promise.all(['r1', 'r2', 'r3', 'r4', 'r5'].map((n) => create(h, t, n)));
    assert.deepEqual(creates.map((r) => r.status).sort(), [201, 201, 201, 409, 409]);

    // Two stopped runtimes of 1024 MiB, one slot of 1024 MiB left: one start wins.
    for (const r of creates.filter((c) => c.status === 201)) await h.call('DELETE', `/v1/runtimes/${r.body.data.id}`, undefined, t);
    for (const n of ['s1', 's2']) {
      await create(h, t, n, { limits: { memory_mib: 1024 } });
      await h.call('POST', `/v1/runtimes/${n}/stop`, undefined, t);
    }
    await create(h, t, 's3', { limits: { memory_mib: 1024 } });
    const starts = await Promise.all(['s1', 's2'].map((n) => h.call('POST', `/v1/runtimes/${n}/start`, undefined, t)));
    assert.deepEqual(starts.map((r) => r.status).sort(), [200, 409]);

    // A store that answers after a while, as a networked one would, between a check and its insert.
    const insert = h.store.checkpoints.insert.bind(h.store.checkpoints);
    h.store.checkpoints.insert = async (cp) => {
      await new Promise((r) => setTimeout(r, 20));
      return insert(cp);
    };
    const checkpoints = await Promise.all(['k1', 'k2', 'k3'].map((n) => h.call('POST', '/v1/runtimes/s3/checkpoints', { name: n }, t)));
    assert.deepEqual(checkpoints.map((r) => r.status).sort(), [201, 201, 409]);
    await h.core.checkpoints.settled();
  });
});

test('per-tenant overrides kept in the store replace the defaults, and apply at once', async () => {
  await withHarness(SMALL, async (h) => {
    const t = await h.token('vip', ['admin']);
    for (const name of ['v1', 'v2', 'v3']) await create(h, t, name);
    overQuota(await create(h, t, 'v4'), /has 3 runtimes, its limit/);
    const quotas = new TenantQuotas(h.store, SMALL);
    await quotas.setLimits('vip', { runtimes: 10, memoryMib: 8192 });
    assert.deepEqual(await quotas.limits('vip'), { ...SMALL, runtimes: 10, memoryMib: 8192 });
    assert.deepEqual(await quotas.limits('other'), SMALL);
    assert.equal((await create(h, t, 'v4')).status, 201);
    await quotas.setLimits('vip', { runtimes: null });
    assert.deepEqual(await quotas.limits('vip'), { ...SMALL, memoryMib: 8192 }, 'null returns a limit to the default');
    overQuota(await create(h, t, 'v5'), /^tenant 'vip' has 4 runtimes; its limit is 3$/);
    assert.deepEqual(await quotas.usage('vip'), { runtimes: 4, vcpus: 4, memoryMib: 2048, checkpoints: 0, checkpointBytes: 0, templates: 0, templateBytes: 0 });
  });
});
