/**
 * The VM hosts' PostgreSQL role (src/store/postgres-host-role.ts; issue 26 §4), on a real
 * PostgreSQL: a store opened with it does what a host does, and the role cannot read a secret's
 * sealed value, write a token, a secret, a tenant's limits or the fleet's settings (its CAs and
 * the hosts' enrollments), nor change the schema.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { hashToken } from '../../src/core/tokens.js';
import { HOST_PRIVILEGES, grantHostRole, setUpHostRole } from '../../src/store/postgres-host-role.js';
import { PG_MIGRATIONS } from '../../src/store/postgres-migrations.js';
import { PostgresStore } from '../../src/store/postgres-store.js';
import { startPostgres, type PostgresCluster } from '../support/postgres-cluster.js';
import { runtime } from './store-contract.js';

const ROLE = 'vessel_host';
let cluster: PostgresCluster;
let databases = 0;

before(() => {
  cluster = startPostgres();
});
after(() => cluster.stop());

/** The same database, as the VM hosts' role (the test cluster trusts local connections). */
const asHost = (ownerUrl: string): string => ownerUrl.replace('postgresql://vessel@', `postgresql://${ROLE}@`);

/** A database migrated by an API node (the owner), and the hosts' role set up on it. */
async function fleetDatabase(): Promise<{ owner: PostgresStore; ownerUrl: string }> {
  const ownerUrl = await cluster.createDatabase(`host_role_${++databases}`);
  const owner = await PostgresStore.open(ownerUrl);
  // The role is the cluster's: made by the first, granted on each database.
  await setUpHostRole(ownerUrl, ROLE, {});
  return { owner, ownerUrl };
}

async function refused(db: pg.Client, statement: string, values: unknown[] = []): Promise<void> {
  await assert.rejects(db.query(statement, values), (err: { code?: string }) => err.code === '42501', statement);
}

test('a store opened as the VM hosts\' role does what a host does: leases, runtimes, rules, checkpoints, audits', async () => {
  const { owner, ownerUrl } = await fleetDatabase();
  const host = await PostgresStore.open(asHost(ownerUrl));
  try {
    await host.nodes.renew({ name: 'host-1', holder: randomUUID(), internalUrl: 'https://h:8082', ingressAddress: 'h:8081', capacity: { memoryMib: 1024, vcpus: 2, runtimes: 10, diskBytes: 1e9 } }, 15);
    const rt = { ...runtime('acme', 'web'), node: 'host-1' };
    await host.runtimes.insert(rt);
    await host.runtimes.update({ ...rt, status: 'paused' });
    // A secret is made on an API node; the host finds it, by name and by id, and makes a rule with it.
    await owner.secrets.insert({ id: randomUUID(), tenantId: 'acme', displayName: 'key', cacheTtlSecs: 0, sealedValue: 'v1.x.y.z', createdAt: new Date().toISOString() });
    const secret = (await host.secrets.find('acme', 'key'))!;
    assert.equal((await host.secrets.find('acme', secret.id))?.displayName, 'key');
    const ruleId = randomUUID();
    await host.rules.insert({ id: ruleId, tenantId: 'acme', runtimeId: rt.id, secretId: secret.id, hostPattern: 'api.example.com', pathPattern: '/*', injection: { type: 'bearer' }, createdAt: new Date().toISOString() } as never);
    assert.equal((await host.rules.listForRuntime(rt.id)).length, 1);
    // Its sealed value is for API nodes alone, even for a rule of the host's own runtime.
    await assert.rejects(host.secrets.findSealed('acme', secret.id), /permission denied/);
    assert.equal((await owner.secrets.findSealed('acme', secret.id))?.sealedValue, 'v1.x.y.z');
    await host.audits.insert([{ id: randomUUID(), tenantId: 'acme', runtimeId: rt.id, category: 'egress', payload: { egress: {} }, createdAt: new Date().toISOString() } as never]);
    await host.audits.prune(['acme'], { perTenant: 0, perRuntime: 0 });
    await host.quotas.usage('acme');
    await host.tokens.findByHash(hashToken('vsl_not_a_token'));
    assert.equal(await host.nodes.credential('host-1'), undefined);
    assert.equal(await host.rules.delete('acme', ruleId), true);
    assert.equal(await host.runtimes.delete('acme', rt.id), true);
  } finally {
    await host.close();
    await owner.close();
  }
});

test("the VM hosts' role reads no sealed secret value, writes no token, secret, tenant limit or fleet setting, and changes no table", async () => {
  const { owner, ownerUrl } = await fleetDatabase();
  await owner.nodes.enroll('host-2', '{"cert":"host-2\'s"}');
  const db = new pg.Client({ connectionString: asHost(ownerUrl) });
  await db.connect();
  try {
    // Minting a token, admin or not, or reviving or removing one.
    await refused(db, "INSERT INTO tokens (id, tenant_id, name, hash, scopes, created_at) VALUES ('t', 'default', 'minted', 'h', 'admin', 'now')");
    await refused(db, 'UPDATE tokens SET revoked_at = NULL');
    await refused(db, 'DELETE FROM tokens');
    // A secret's sealed value read, in any way that names the column or the whole row.
    await refused(db, 'SELECT sealed_value FROM secrets');
    await refused(db, 'SELECT * FROM secrets');
    await refused(db, 'SELECT s FROM secrets s');
    await refused(db, "SELECT id FROM secrets WHERE sealed_value LIKE 'v1.%'");
    await refused(db, 'COPY secrets TO STDOUT');
    // A secret's value swapped for one the host chose, or a secret dropped.
    await refused(db, "UPDATE secrets SET sealed_value = 'x'");
    await refused(db, "INSERT INTO secrets (id, tenant_id, display_name, cache_ttl_secs, sealed_value, created_at) VALUES ('s', 'acme', 'n', 0, 'x', 'now')");
    await refused(db, 'DELETE FROM secrets');
    await refused(db, "INSERT INTO tenant_limits (tenant_id, runtimes, updated_at) VALUES ('acme', 100000, 'now')");
    // Another host's enrollment, or the fleet's CAs, replaced.
    await refused(db, "UPDATE fleet_settings SET value = 'mine'");
    await refused(db, "INSERT INTO fleet_settings (name, value) VALUES ('node-credential:host-3', 'mine')");
    await refused(db, "DELETE FROM fleet_settings WHERE name = 'node-credential:host-2'");
    await refused(db, 'DELETE FROM nodes');
    await refused(db, 'ALTER TABLE tokens ADD COLUMN planted TEXT');
    await refused(db, 'DROP TABLE audits');
  } finally {
    await db.end();
  }
  // Through the store, as a compromised host's own code would try it.
  const host = await PostgresStore.open(asHost(ownerUrl));
  try {
    await assert.rejects(host.tokens.put({ id: 'admin', tenantId: 'default', name: 'admin', hash: hashToken('vsl_minted'), scopes: ['admin'], createdAt: new Date().toISOString(), revokedAt: null } as never), /permission denied/);
    await assert.rejects(host.nodes.enroll('host-2', 'mine'), /permission denied/);
    assert.equal(await owner.nodes.credential('host-2'), '{"cert":"host-2\'s"}');
  } finally {
    await host.close();
    await owner.close();
  }
});

test("the VM hosts' role moves the hosts' holdings only through its runtimes: not directly, not with the owner's trigger on a table of its own, not through a temporary table of that name", async () => {
  const { owner, ownerUrl } = await fleetDatabase();
  const rt = runtime('acme', 'placed', 'running', 2, 1024);
  await owner.runtimes.insert(rt);
  const db = new pg.Client({ connectionString: asHost(ownerUrl) });
  await db.connect();
  try {
    await refused(db, "INSERT INTO node_holdings (node, runtimes, vcpus, memory_mib) VALUES ('host-b', 1, 100000, 1)");
    await refused(db, "UPDATE node_holdings SET vcpus = 100000");
    // A table of the host's own, with the trigger function that runs as the owner.
    await db.query('CREATE TEMP TABLE fake (id text, node text, status text, resources text)');
    await refused(db, 'CREATE TRIGGER planted AFTER INSERT ON fake FOR EACH ROW EXECUTE FUNCTION runtimes_held_change()');
    // A temporary node_holdings, which an unqualified name in the owner's function would find first.
    await db.query('CREATE TEMP TABLE node_holdings (node text PRIMARY KEY, runtimes bigint, vcpus numeric, memory_mib numeric)');
    await db.query('GRANT ALL ON node_holdings TO PUBLIC');
    // The host places its runtime in that same session: the count goes to the real table.
    assert.equal((await db.query("UPDATE runtimes SET node = 'host-a' WHERE id = $1", [rt.id])).rowCount, 1);
    assert.equal((await db.query('SELECT count(*)::int AS n FROM pg_temp.node_holdings')).rows[0].n, 0);
  } finally {
    await db.end();
  }
  try {
    assert.deepEqual(await owner.nodes.load(), new Map([['host-a', { runtimes: 1, vcpus: 2, memoryMib: 1024 }]]), 'counted in the real table');
  } finally {
    await owner.close();
  }
});

test('every table of the schema has its decided privileges for VM hosts', async () => {
  const { owner, ownerUrl } = await fleetDatabase();
  await owner.close();
  const db = new pg.Client({ connectionString: ownerUrl });
  await db.connect();
  try {
    const { rows } = await db.query<{ table_name: string }>("SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' ORDER BY table_name");
    assert.deepEqual(rows.map((r) => r.table_name), Object.keys(HOST_PRIVILEGES).sort(), 'a new table needs a line in HOST_PRIVILEGES');
    const granted = await db.query<{ table_name: string; privilege_type: string }>('SELECT table_name, privilege_type FROM information_schema.role_table_grants WHERE grantee = $1 ORDER BY table_name, privilege_type', [ROLE]);
    const byTable: Record<string, string[]> = {};
    for (const g of granted.rows) (byTable[g.table_name] ??= []).push(g.privilege_type);
    // Column privileges: those granted on a column alone (a table privilege shows on every column too).
    const columns = await db.query<{ table_name: string; column_name: string }>(
      "SELECT table_name, column_name FROM information_schema.column_privileges WHERE grantee = $1 AND privilege_type = 'SELECT' ORDER BY table_name, column_name",
      [ROLE],
    );
    const selectable: Record<string, string[]> = {};
    for (const c of columns.rows) (selectable[c.table_name] ??= []).push(c.column_name);
    for (const [table, privileges] of Object.entries(HOST_PRIVILEGES)) {
      if ('select' in privileges) {
        assert.equal(byTable[table], undefined, `${table}: no privilege on the whole table`);
        assert.deepEqual(selectable[table], [...privileges.select].sort(), `${table}: SELECT of these columns alone`);
      } else {
        assert.deepEqual(byTable[table], [...privileges].sort(), table);
      }
    }
    assert.ok(!selectable.secrets!.includes('sealed_value'));
  } finally {
    await db.end();
  }
});

test('a VM host does not start on a schema an API node has not migrated yet, and says so', async () => {
  const url = await cluster.createDatabase(`host_role_${++databases}`);
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    await db.query('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
    for (const m of PG_MIGRATIONS.slice(0, -1)) {
      await db.query(m.sql);
      await db.query("INSERT INTO schema_migrations VALUES ($1, '2025-01-01T00:00:00Z')", [m.version]);
    }
    await db.query(`DO $$ BEGIN CREATE ROLE ${ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
    await grantHostRole(db as unknown as pg.PoolClient, ROLE);
  } finally {
    await db.end();
  }
  await assert.rejects(PostgresStore.open(asHost(url)), /start an API node of this version first/);
});

test("an API node's upgrade takes the sealed values from a hosts' role granted before, which read whole secrets", async () => {
  const url = await cluster.createDatabase(`host_role_${++databases}`);
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  try {
    // A fleet at version 6, its hosts' role set up then: SELECT on all of `secrets`.
    await db.query('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
    for (const m of PG_MIGRATIONS.filter((m) => m.version <= 6)) {
      await db.query(m.sql);
      await db.query("INSERT INTO schema_migrations VALUES ($1, '2025-01-01T00:00:00Z')", [m.version]);
    }
    await db.query(`DO $$ BEGIN CREATE ROLE ${ROLE} LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
    await db.query(`GRANT USAGE ON SCHEMA public TO ${ROLE}`);
    await db.query(`GRANT SELECT ON secrets TO ${ROLE}`);
    await db.query("INSERT INTO fleet_settings (name, value) VALUES ('host-db-role', $1)", [ROLE]);
  } finally {
    await db.end();
  }
  const asRole = new pg.Client({ connectionString: asHost(url) });
  await asRole.connect();
  try {
    await asRole.query('SELECT sealed_value FROM secrets');
    // An API node of this version starts: it migrates, and grants the role again.
    await (await PostgresStore.open(url)).close();
    await refused(asRole, 'SELECT sealed_value FROM secrets');
    await asRole.query('SELECT id, display_name FROM secrets');
  } finally {
    await asRole.end();
  }
});
