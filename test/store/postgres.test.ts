/**
 * The store contract (store-contract.ts) on a real PostgreSQL started for this file, each case on
 * a database of its own; then what only a shared database has to do: migrate once when several
 * processes start together, and hold the rows' relations itself.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { VesselError } from '../../src/core/errors.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { openStore } from '../../src/store/open-store.js';
import { PG_MIGRATIONS } from '../../src/store/postgres-migrations.js';
import { PostgresStore } from '../../src/store/postgres-store.js';
import { startPostgres, type PostgresCluster } from '../support/postgres-cluster.js';
import { runtime, storeContract } from './store-contract.js';

let cluster: PostgresCluster;
before(() => {
  cluster = startPostgres();
});
after(() => cluster.stop());

let databases = 0;
const freshDatabase = (): Promise<string> => cluster.createDatabase(`contract_${++databases}`);

storeContract({
  async fresh() {
    const url = await freshDatabase();
    return { store: await PostgresStore.open(url), reopen: () => PostgresStore.open(url) };
  },
});

test('stores starting at once on an empty database migrate it once, under the advisory lock', async () => {
  const url = await freshDatabase();
  const stores = await Promise.all(Array.from({ length: 4 }, () => PostgresStore.open(url, { poolSize: 2 })));
  await Promise.all(stores.map((s) => s.close()));
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ version: number }>('SELECT version FROM schema_migrations ORDER BY version');
    assert.deepEqual(rows.map((r) => r.version), PG_MIGRATIONS.map((m) => m.version));
  } finally {
    await client.end();
  }
});

test('the PostgreSQL schema is at the same version as the SQLite one', () => {
  assert.deepEqual(PG_MIGRATIONS.map((m) => m.version), MIGRATIONS.map((m) => m.version));
});

test('the database holds the relations: a rule needs its runtime and secret, goes with its runtime, and keeps its secret', async () => {
  const store = await PostgresStore.open(await freshDatabase());
  try {
    const rt = runtime('acme', 'web');
    await store.runtimes.insert(rt);
    const secret = { id: crypto.randomUUID(), tenantId: 'acme', displayName: 'key', cacheTtlSecs: 60, sealedValue: 'sealed', createdAt: new Date().toISOString() };
    await store.secrets.insert(secret);
    const rule = { id: crypto.randomUUID(), tenantId: 'acme', runtimeId: rt.id, secretId: secret.id, hostPattern: 'a.example', pathPattern: '/*', injection: { headerName: 'X-Key' }, createdAt: new Date().toISOString() };
    const code = (expected: string) => (err: unknown) => err instanceof VesselError && err.code === expected;
    await assert.rejects(store.rules.insert({ ...rule, runtimeId: crypto.randomUUID() }), code('not_found'));
    await assert.rejects(store.rules.insert({ ...rule, secretId: crypto.randomUUID() }), code('not_found'));
    await store.rules.insert(rule);
    await assert.rejects(store.secrets.delete('acme', secret.id), code('failed_precondition'));
    assert.equal(await store.runtimes.delete('acme', rt.id), true);
    assert.deepEqual(await store.rules.listForRuntime(rt.id), []);
    assert.equal(await store.secrets.delete('acme', secret.id), true);
  } finally {
    await store.close();
  }
});

test('VESSEL_DATABASE_URL puts the host commands on PostgreSQL: a token made by the CLI is in the database, not in the data directory', async () => {
  const url = await freshDatabase();
  const dataDir = mkdtempSync(join(tmpdir(), 'vessel-pg-cli-'));
  try {
    const cli = fileURLToPath(new URL('../../src/cli/main.js', import.meta.url));
    const env = { ...process.env, VESSEL_DATA_DIR: dataDir, VESSEL_DATABASE_URL: url };
    const made = JSON.parse(execFileSync(process.execPath, [cli, 'token', 'create', '--tenant', 'acme', '--scopes', 'runtimes:read'], { env, encoding: 'utf8' }));
    const store = await openStore({ dataDir, databaseUrl: url });
    try {
      assert.ok(store instanceof PostgresStore);
      assert.deepEqual((await store.tokens.list()).map((t) => [t.id, t.tenantId]), [[made.id, 'acme']]);
    } finally {
      await store.close();
    }
    const sqlite = await openStore({ dataDir, databaseUrl: undefined });
    try {
      assert.deepEqual(await sqlite.tokens.list(), [], "the data directory's SQLite store was not used");
    } finally {
      await sqlite.close();
    }
  } finally {
    rmSync(dataDir, { recursive: true, force: true });
  }
});

test('a database at version 1 gains checkpoint sizes and tenant limits at start; its records are intact', async () => {
  const url = await freshDatabase();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
    await client.query(PG_MIGRATIONS[0]!.sql);
    await client.query("INSERT INTO schema_migrations VALUES (1, '2025-01-01T00:00:00Z')");
    await client.query(
      `INSERT INTO checkpoints (id, tenant_id, display_name, state, resources, deleted, created_at)
       VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a01', 'acme', 'old', 'ready', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', 0, '2025-01-01T00:00:00Z')`,
    );
  } finally {
    await client.end();
  }
  const store = await PostgresStore.open(url);
  try {
    assert.equal((await store.checkpoints.find('acme', 'old'))?.diskBytes, null);
    assert.deepEqual(await store.quotas.usage('acme'), { runtimes: 0, vcpus: 0, memoryMib: 0, checkpoints: 1, checkpointBytes: 0, templates: 0, templateBytes: 0 });
    await store.quotas.setOverrides('acme', { runtimes: 5 });
    assert.deepEqual(await store.quotas.overrides('acme'), { runtimes: 5 });
  } finally {
    await store.close();
  }
});

test('a database at version 3 gains VM hosts: its runtimes and checkpoints are on no node, and none is registered', async () => {
  const url = await freshDatabase();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    await client.query('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
    for (const m of PG_MIGRATIONS.filter((m) => m.version <= 3)) {
      await client.query(m.sql);
      await client.query("INSERT INTO schema_migrations VALUES ($1, '2025-01-01T00:00:00Z')", [m.version]);
    }
    await client.query(
      `INSERT INTO runtimes (id, tenant_id, display_name, status, egress_policy, ingress_specs, resources, created_at, updated_at)
       VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a04', 'acme', 'live', 'running', '{"enabled":true,"allowed_hosts":[]}', '[]', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z')`,
    );
    await client.query(
      `INSERT INTO checkpoints (id, tenant_id, display_name, state, resources, deleted, disk_bytes, created_at)
       VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a05', 'acme', 'snap', 'ready', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', 0, 1000, '2025-01-01T00:00:00Z')`,
    );
  } finally {
    await client.end();
  }
  const store = await PostgresStore.open(url);
  try {
    const rt = await store.runtimes.find('acme', 'live');
    assert.equal(rt?.node, null);
    assert.equal((await store.checkpoints.find('acme', 'snap'))?.node, null);
    assert.deepEqual(await store.nodes.list(), []);
    assert.deepEqual(await store.nodes.load(), new Map());
    await store.runtimes.update({ ...rt!, node: 'host-a' });
    assert.deepEqual(await store.nodes.load(), new Map([['host-a', { runtimes: 1, vcpus: 1, memoryMib: 512 }]]));
  } finally {
    await store.close();
  }
});
