/** A data directory made by the first release opens with today's schema, its records intact. */
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Database } from '../../src/store/sqlite-driver.js';
import { MIGRATIONS } from '../../src/store/migrations.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';

/** A database file with the migrations up to `version` applied, as a release of that time left it. */
function databaseAt(file: string, version: number): Database {
  const old = new Database(file);
  old.exec('CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
  for (const m of MIGRATIONS.filter((m) => m.version <= version)) {
    old.exec(m.sql);
    old.prepare("INSERT INTO schema_migrations VALUES (?, '2025-01-01T00:00:00Z')").run(m.version);
  }
  return old;
}

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
      assert.deepEqual(await store.quotas.usage('acme'), { runtimes: 0, vcpus: 0, memoryMib: 0, checkpoints: 1, checkpointBytes: 0, templates: 0, templateBytes: 0 });
      await store.quotas.setOverrides('acme', { runtimes: 5 });
      assert.deepEqual(await store.quotas.overrides('acme'), { runtimes: 5 });
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a version 2 store gains labels and lifecycle settings; a runtime stopped before counts from its last update', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 2);
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
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a version 3 store gains VM hosts: its runtimes and checkpoints are on no node (a single host), and none is registered', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 3);
    old
      .prepare(
        `INSERT INTO runtimes (id, tenant_id, display_name, status, egress_policy, ingress_specs, resources, created_at, updated_at)
         VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a04', 'acme', 'live', 'running', '{"enabled":true,"allowed_hosts":[]}', '[]', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z')`,
      )
      .run();
    old
      .prepare(
        `INSERT INTO checkpoints (id, tenant_id, display_name, state, resources, deleted, disk_bytes, created_at)
         VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a05', 'acme', 'snap', 'ready', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', 0, 1000, '2025-01-01T00:00:00Z')`,
      )
      .run();
    old.close();

    const store = new SqliteStore(file);
    try {
      const rt = await store.runtimes.find('acme', 'live');
      assert.equal(rt?.node, null);
      assert.equal(rt?.status, 'running');
      assert.equal((await store.checkpoints.find('acme', 'snap'))?.node, null);
      assert.deepEqual(await store.nodes.list(), []);
      assert.deepEqual(await store.nodes.load(), new Map(), 'a runtime on no node loads none');
      await store.runtimes.update({ ...rt!, node: 'host-a' });
      assert.deepEqual(await store.nodes.load(), new Map([['host-a', { runtimes: 1, vcpus: 1, memoryMib: 512 }]]));
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a version 4 store gains fleet settings, none set, and name holders; its hosts and runtimes are intact', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 4);
    old
      .prepare(
        `INSERT INTO nodes (name, internal_url, ingress_address, memory_mib, vcpus, runtimes, disk_bytes, draining, lease_expires_at, registered_at)
         VALUES ('host-a', 'http://10.0.0.1:8082', NULL, 1024, 2, 100, 1000000, 1, '2025-01-01T00:00:00Z', '2025-01-01T00:00:00Z')`,
      )
      .run();
    old.close();

    const store = new SqliteStore(file);
    try {
      assert.deepEqual((await store.nodes.list()).map((n) => [n.name, n.draining, n.alive]), [['host-a', true, false]]);
      assert.equal(await store.nodes.shared('egress-ca', 'first'), 'first');
      assert.equal(await store.nodes.shared('egress-ca', 'second'), 'first');
      // A host registered before holders existed holds none: its next renewal, whoever makes it, takes the name.
      assert.equal((await store.nodes.find('host-a'))?.holder, '');
      const capacity = { memoryMib: 1024, vcpus: 2, runtimes: 100, diskBytes: 1_000_000 };
      const renewed = await store.nodes.renew({ name: 'host-a', holder: 'h-1', internalUrl: 'http://10.0.0.1:8082', ingressAddress: null, capacity }, 30);
      assert.deepEqual([renewed.holder, renewed.draining, renewed.alive], ['h-1', true, true]);
    } finally {
      await store.close();
    }
    const versions = new Database(file);
    try {
      const { v } = versions.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number };
      assert.equal(v, MIGRATIONS.at(-1)!.version);
    } finally {
      versions.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a version 6 store gains templates, none yet, and template limits; a tenant\'s own limits are intact', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 6);
    old.prepare("INSERT INTO tenant_limits (tenant_id, runtimes, checkpoint_gib, updated_at) VALUES ('acme', 7, 5, '2025-01-01T00:00:00Z')").run();
    old.close();
    const store = new SqliteStore(file);
    try {
      assert.deepEqual(await store.quotas.overrides('acme'), { runtimes: 7, checkpointGib: 5 });
      assert.deepEqual(await store.templates.listAll(), []);
      await store.quotas.setOverrides('acme', { templates: 4 });
      assert.deepEqual(await store.quotas.overrides('acme'), { runtimes: 7, checkpointGib: 5, templates: 4 });
      const usage = await store.quotas.usage('acme');
      assert.deepEqual([usage.templates, usage.templateBytes], [0, 0]);
    } finally {
      await store.close();
    }
    const versions = new Database(file);
    try {
      const { v } = versions.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number };
      assert.equal(v, MIGRATIONS.at(-1)!.version);
    } finally {
      versions.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a version 8 store's runtimes and checkpoints gain template_id, null: they are of the built-in image", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 8);
    old
      .prepare(
        `INSERT INTO runtimes (id, tenant_id, display_name, status, egress_policy, ingress_specs, resources, created_at, updated_at)
         VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a09', 'acme', 'old-rt', 'running', '{"enabled":true,"allowed_hosts":[]}', '[]', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', '2025-01-01T00:00:00Z', '2025-02-01T00:00:00Z')`,
      )
      .run();
    old
      .prepare(
        `INSERT INTO checkpoints (id, tenant_id, display_name, state, resources, deleted, created_at)
         VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a0a', 'acme', 'old-cp', 'ready', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', 0, '2025-01-01T00:00:00Z')`,
      )
      .run();
    old.close();
    const store = new SqliteStore(file);
    try {
      assert.equal((await store.runtimes.find('acme', 'old-rt'))?.templateId, null);
      assert.equal((await store.checkpoints.find('acme', 'old-cp'))?.templateId, null);
    } finally {
      await store.close();
    }
    const versions = new Database(file);
    try {
      const { v } = versions.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number };
      assert.equal(v, MIGRATIONS.at(-1)!.version);
    } finally {
      versions.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a version 9 store's hosts' holdings are counted from the runtimes it has", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 9);
    const insert = old.prepare(
      `INSERT INTO runtimes (id, tenant_id, display_name, status, egress_policy, ingress_specs, resources, created_at, updated_at, node)
       VALUES (?, 'acme', ?, ?, '{"enabled":true,"allowed_hosts":[]}', '[]', ?, '2025-01-01T00:00:00Z', '2025-02-01T00:00:00Z', ?)`,
    );
    const resources = (vcpus: number, mib: number) => JSON.stringify({ limits: { memory_mib: mib }, requests: { memory_mib: mib }, vcpus });
    insert.run(randomUUID(), 'a-live', 'running', resources(2, 1024), 'host-a');
    insert.run(randomUUID(), 'a-off', 'shutdown', resources(4, 4096), 'host-a');
    insert.run(randomUUID(), 'b-paused', 'paused', resources(1, 256), 'host-b');
    insert.run(randomUUID(), 'single', 'running', resources(8, 8192), null);
    old.close();
    const store = new SqliteStore(file);
    try {
      assert.deepEqual(await store.nodes.load(), new Map([['host-a', { runtimes: 2, vcpus: 2, memoryMib: 1024 }], ['host-b', { runtimes: 1, vcpus: 1, memoryMib: 256 }]]));
    } finally {
      await store.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a version 9 store's runtimes gain an empty environment", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 9);
    old
      .prepare(
        `INSERT INTO runtimes (id, tenant_id, display_name, status, egress_policy, ingress_specs, resources, created_at, updated_at)
         VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a09', 'acme', 'old-rt', 'running', '{"enabled":true,"allowed_hosts":[]}', '[]', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', '2025-01-01T00:00:00Z', '2025-02-01T00:00:00Z')`,
      )
      .run();
    old.close();
    const store = new SqliteStore(file);
    try {
      assert.deepEqual((await store.runtimes.find('acme', 'old-rt'))?.env, {});
    } finally {
      await store.close();
    }
    const versions = new Database(file);
    try {
      const { v } = versions.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number };
      assert.equal(v, MIGRATIONS.at(-1)!.version);
      assert.equal(v, MIGRATIONS.at(-1)!.version, 'this test covers the latest migration');
    } finally {
      versions.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a version 9 store's checkpoints gain archive_digest, null: none is in object storage yet, and each ready one is pending", async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-upgrade-'));
  try {
    const file = join(dir, 'vessel.db');
    const old = databaseAt(file, 9);
    old
      .prepare(
        `INSERT INTO checkpoints (id, tenant_id, display_name, state, resources, deleted, created_at, node)
         VALUES ('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a0b', 'acme', 'old-cp', 'ready', '{"limits":{"memory_mib":512},"requests":{"memory_mib":512},"vcpus":1}', 0, '2025-01-01T00:00:00Z', 'host-a')`,
      )
      .run();
    old.close();
    const store = new SqliteStore(file);
    try {
      assert.equal(await store.checkpoints.archiveDigest('6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a0b'), null);
      assert.deepEqual(await store.checkpoints.listUnarchived('host-a'), ['6f1c3f36-8a0e-4bde-9d8e-0d3f5c2b1a0b']);
    } finally {
      await store.close();
    }
    const versions = new Database(file);
    try {
      const { v } = versions.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number };
      assert.equal(v, MIGRATIONS.at(-1)!.version, 'this test covers the latest migration');
    } finally {
      versions.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
