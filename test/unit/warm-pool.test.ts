/** The warm pool through the core, with the fake driver and gateway: spares become runtimes. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Core } from '../../src/core/core.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';

async function settle(driver: FakeDriver, spares: number): Promise<void> {
  for (let i = 0; i < 100 && driver.spares.size < spares; i++) await new Promise((r) => setTimeout(r, 5));
  assert.equal(driver.spares.size, spares);
}

test('creates take spares once the pool has a target, and the pool refills', async () => {
  const driver = new FakeDriver();
  const gateway = new FakeGateway();
  const store = new SqliteStore(join(mkdtempSync(join(tmpdir(), 'vessel-pool-')), 'db'));
  const core = new Core({ store, driver, gateway, secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: ROOMY_TENANT_LIMITS, warmPoolSize: 2 });
  const first = await core.runtimes.create('t', { display_name: 'first' });
  assert.ok(!driver.spares.has(first.id), 'the first create sets the target and boots as usual');
  await settle(driver, 2);
  const spareIds = [...driver.spares];
  const second = await core.runtimes.create('t', { display_name: 'second', egress_policy: { enabled: true, allowed_hosts: ['api.test'] } });
  assert.ok(spareIds.includes(second.id), 'the runtime is a spare, under the id it was made for');
  assert.equal(second.status, 'running');
  assert.deepEqual(gateway.subjects.get(second.id)?.policy, { enabled: true, allowed_hosts: ['api.test'] }, 'its network now enforces the runtime policy');
  assert.equal(gateway.subjects.get(second.id)?.tenantId, 't');
  await settle(driver, 2);

  // A create that fails on its name gives its spare back to nobody: it is destroyed.
  const before = [...driver.spares];
  await assert.rejects(core.runtimes.create('t', { display_name: 'second' }), /already/);
  const taken = before.find((id) => !driver.spares.has(id))!;
  assert.ok(taken !== undefined && !driver.vms.has(taken) && !gateway.subjects.has(taken));
  await core.close();
});
