/**
 * A rule or policy change is answered only once the gateway holds it: a guest request sent right
 * after the API's answer must see it. The gateway here takes its time, as the listeners' process
 * does on a loaded host.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Core } from '../../src/core/core.js';
import type { EgressSubject } from '../../src/core/ports.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';

class SlowGateway extends FakeGateway {
  override async update(subject: EgressSubject): Promise<void> {
    await new Promise((r) => setTimeout(r, 50));
    await super.update(subject);
  }
}

test('a rule created, a rule deleted and a policy patched are in the gateway when the call returns', async () => {
  const gateway = new SlowGateway();
  const store = new SqliteStore(join(mkdtempSync(join(tmpdir(), 'vessel-egress-updates-')), 'db'));
  const core = new Core({ store, driver: new FakeDriver(), gateway, secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: ROOMY_TENANT_LIMITS });
  const rt = await core.runtimes.create('t', { display_name: 'rt', egress_policy: { enabled: true, allowed_hosts: ['api.test'] } });
  await core.secrets.create('t', { name: 'key', value: 'v' });

  const { rule } = await core.rules.create('t', rt.id, { host: 'api.test', secret: 'key', injection: { headerName: 'X-Api-Key' } });
  assert.deepEqual(gateway.subjects.get(rt.id)?.rules.map((r) => r.id), [rule.id]);

  await core.runtimes.patch('t', rt.id, { egress_policy: { enabled: true, allowed_hosts: ['api.test', 'other.test'] } });
  assert.deepEqual(gateway.subjects.get(rt.id)?.policy.allowed_hosts, ['api.test', 'other.test']);

  await core.rules.delete('t', rule.id, rt.id);
  assert.deepEqual(gateway.subjects.get(rt.id)?.rules, []);
  await core.close();
});
