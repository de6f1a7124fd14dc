/**
 * Quota admission across a fleet's processes (issue 30 §3): three cores, each a VM host of its
 * own with its own connection pool to one real PostgreSQL database, and a tenant limited to 2
 * runtimes. Twelve creates at once, spread over the three, admit exactly 2, every round.
 * Before the store's lock on the tenant, each process checked against what it alone had claimed,
 * and five rounds admitted 3, 5, 2, 5 and 4.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { Core } from '../../src/core/core.js';
import { VesselError } from '../../src/core/errors.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { PostgresStore } from '../../src/store/postgres-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';
import { startPostgres, type PostgresCluster } from '../support/postgres-cluster.js';

let cluster: PostgresCluster;
before(() => {
  cluster = startPostgres();
});
after(() => cluster.stop());

const LIMIT = 2;
const ROUNDS = 5;
const CREATES = 12;

test(`${CREATES} creates at once over three processes admit exactly the limit of ${LIMIT}, every round`, async () => {
  const url = await cluster.createDatabase('quota_race');
  const stores = await Promise.all([1, 2, 3].map(() => PostgresStore.open(url)));
  try {
    const key = randomBytes(32);
    const cores = stores.map(
      (store, i) => new Core({ store, driver: new FakeDriver(), gateway: new FakeGateway(), secretBox: new SecretBox(key), log: silentLog, tenantLimits: { ...ROOMY_TENANT_LIMITS, runtimes: LIMIT }, node: `host-${i + 1}` }),
    );
    for (let round = 1; round <= ROUNDS; round++) {
      const tenant = `acme-${round}`;
      const outcomes = await Promise.allSettled(
        Array.from({ length: CREATES }, (_, i) => cores[i % cores.length]!.runtimes.create(tenant, { display_name: `r${round}-${i}` })),
      );
      const admitted = outcomes.filter((o) => o.status === 'fulfilled').length;
      const refusals = outcomes.flatMap((o) => (o.status === 'rejected' ? [o.reason as unknown] : []));
      for (const err of refusals) {
        assert.ok(err instanceof VesselError && err.code === 'failed_precondition', `a refusal is the quota's: ${String(err)}`);
      }
      assert.equal(admitted, LIMIT, `round ${round}: admitted ${admitted}`);
      assert.equal((await stores[0]!.quotas.usage(tenant)).runtimes, LIMIT, `round ${round}: the store holds the limit`);
    }
  } finally {
    await Promise.all(stores.map((s) => s.close()));
  }
});
