/** A data directory made by the first release opens with today's schema, its records intact. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Database } from '../../src/store/sqlite-driver.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';

test('a version 1 store gains checkpoint sizes and tenant limits; old checkpoints have no size', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = new Database(file);
    old.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
    old.exec(MIGRATIONS[0]!.sql);
    old.prepare("INSERT INTO schema_migrations VALUES (1, '2025-01-01T00:00:00Z')").run();
    old
      .prepare(
        `INSERT INTO checkpoints (id, tenant_id, display_name, state, resources, deleted, created_at)
         VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a01', 'acme', 'old', 'ready', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', 0, '2025-01-01T00:00:00Z')`,
      )
      .run();
    old.close();

    const store = new SqliteStore(file);
    try {
      const cp = await store.checkpoints.find('acme', 'old');
      assert.equal(cp?.diskBytes, null);
      assert.deepEqual(await store.quotas.usage('acme'), { runtimes: 0, vcpus: 0, memoryMib: 0, checkpoints: 1, checkpointBytes: 0 });
      await store.quotas.setOverrides('acme', { runtimes: 5 });
      assert.deepEqual(await store.quotas.overrides('acme'), { runtimes: 5 });
    } finally {
      store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a version 2 store gains labels and lifecycle settings; a runtime stopped before counts from its last update', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = new Database(file);
    old.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
    for (const m of MIGRATIONS.filter((m) => m.version <= 2)) {
      old.exec(m.sql);
      old.prepare("INSERT INTO schema_migrations VALUES (?, '2025-01-01T00:00:00Z')").run(m.version);
    }
    const insert = old.prepare(
      `INSERT INTO runtimes (id, tenant_id, display_name, status, egress_policy, ingress_specs, resources, created_at, updated_at)
       VALUES (?, 'acme', ?, ?, '{"enabled":true,"allowed_hosts":[]}', '[]', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', '2025-01-01T00:00:00Z', '2025-02-01T00:00:00Z')`,
    );
    insert.run('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a02', 'stopped', 'shutdown');
    insert.run('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a03', 'live', 'running');
    old.close();

    const store = new SqliteStore(file);
    try {
      const stopped = await store.runtimes.find('acme', 'stopped');
      assert.deepEqual(stopped?.labels, {});
      assert.deepEqual(stopped?.lifecycle, { idleTimeoutSecs: null, onIdle: 'suspend', autoDeleteSecs: null });
      assert.equal(stopped?.stoppedAt, '2025-02-01T00:00:00Z');
      assert.equal((await store.runtimes.find('acme', 'live'))?.stoppedAt, null);
      const page = await store.runtimes.listMatching('acme', { labels: [], statuses: ['running'] }, { limit: 10 });
      assert.deepEqual(page.items.map((r) => r.displayName), ['live']);
    } finally {
      store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
