/** Versioned schema. Append only: a released migration is never edited. */
export const MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
  {
    version: 1,
    sql: `
      CREATE TABLE tokens (
        id TEXT PRIMARY KEY,
        tenant_id TEXT NOT NULL,
        name TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        scopes TEXT NOT NULL,
        created_at TEXT NOT NULL,
        revoked_at TEXT
      );
      CREATE TABLE runtimes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        display_name TEXT NOT NULL,
        status TEXT NOT NULL,
        status_message TEXT,
        egress_policy TEXT NOT NULL,
        ingress_specs TEXT NOT NULL,
        resources TEXT NOT NULL,
        pending_resources TEXT,
        base_checkpoint_id TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (tenant_id, display_name)
      );
      CREATE TABLE secrets (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        display_name TEXT NOT NULL,
        cache_ttl_secs INTEGER NOT NULL,
        sealed_value TEXT NOT NULL,
        created_at TEXT NOT NULL,
        UNIQUE (tenant_id, display_name)
      );
      CREATE TABLE injection_rules (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        runtime_id TEXT NOT NULL,
        secret_id TEXT NOT NULL,
        host_pattern TEXT NOT NULL,
        path_pattern TEXT NOT NULL,
        injection TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE INDEX injection_rules_runtime ON injection_rules (runtime_id);
      CREATE INDEX injection_rules_secret ON injection_rules (secret_id);
      CREATE TABLE checkpoints (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT,
        display_name TEXT NOT NULL,
        state TEXT NOT NULL,
        state_message TEXT,
        resources TEXT NOT NULL,
        source_runtime_id TEXT,
        parent_checkpoint_id TEXT,
        deleted INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL
      );
      CREATE UNIQUE INDEX checkpoints_name ON checkpoints (coalesce(tenant_id, ''), display_name) WHERE deleted = 0;
      CREATE TABLE audits (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        runtime_id TEXT NOT NULL,
        category TEXT NOT NULL,
        payload TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE INDEX audits_tenant ON audits (tenant_id, seq);
      CREATE INDEX audits_runtime ON audits (runtime_id, seq);
    `,
  },
  {
    // Per-tenant quotas: the disk space of each capture (NULL where it was not measured), the
    // tenant's checkpoints found without a scan, and the limits an operator set per tenant
    // (NULL: the configured default).
    version: 2,
    sql: `
      ALTER TABLE checkpoints ADD COLUMN disk_bytes INTEGER;
      CREATE INDEX checkpoints_tenant ON checkpoints (tenant_id) WHERE deleted = 0;
      CREATE TABLE tenant_limits (
        tenant_id TEXT PRIMARY KEY,
        runtimes INTEGER,
        vcpus INTEGER,
        memory_mib INTEGER,
        checkpoints INTEGER,
        checkpoint_gib INTEGER,
        updated_at TEXT NOT NULL
      );
    `,
  },
  {
    // Labels and lifecycle settings per runtime (docs/api.md, "Labels" and "Lifecycle settings").
    // stopped_at starts the auto-delete clock; a runtime already stopped before this version
    // counts from its last update, the closest thing to when it stopped that the store knows.
    version: 3,
    sql: `
      ALTER TABLE runtimes ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
      ALTER TABLE runtimes ADD COLUMN idle_timeout_secs INTEGER;
      ALTER TABLE runtimes ADD COLUMN on_idle TEXT NOT NULL DEFAULT 'suspend';
      ALTER TABLE runtimes ADD COLUMN auto_delete_secs INTEGER;
      ALTER TABLE runtimes ADD COLUMN stopped_at TEXT;
      UPDATE runtimes SET stopped_at = updated_at WHERE status IN ('shutdown', 'suspended', 'crashed', 'error');
      CREATE INDEX runtimes_tenant ON runtimes (tenant_id, seq);
    `,
  },
  {
    // A fleet (docs/scaling.md): the VM hosts with their leases and capacity, and the host each
    // runtime runs on and each checkpoint's files lie on. Rows from before have no host (NULL):
    // a single host, which registers none. Leases are ISO strings here, compared by the process
    // clock (SQLite is one host); PostgreSQL keeps them as timestamptz on its own clock.
    version: 4,
    sql: `
      CREATE TABLE nodes (
        name TEXT PRIMARY KEY,
        internal_url TEXT NOT NULL,
        ingress_address TEXT,
        memory_mib INTEGER NOT NULL,
        vcpus INTEGER NOT NULL,
        runtimes INTEGER NOT NULL,
        disk_bytes INTEGER NOT NULL,
        draining INTEGER NOT NULL DEFAULT 0,
        lease_expires_at TEXT NOT NULL,
        registered_at TEXT NOT NULL
      );
      ALTER TABLE runtimes ADD COLUMN node TEXT;
      ALTER TABLE checkpoints ADD COLUMN node TEXT;
      CREATE INDEX runtimes_node ON runtimes (node);
    `,
  },
  {
    // What every host of a fleet must hold alike, decided once by whichever starts first: the
    // egress CA, which a checkpoint's guest trusts wherever its files move (docs/scaling.md).
    version: 5,
    sql: `
      CREATE TABLE fleet_settings (
        name TEXT PRIMARY KEY,
        value TEXT NOT NULL
      );
    `,
  },
  {
    // The id of the host that holds each name (in its data directory): a second one is refused
    // while the first one's lease runs. Hosts registered before have none until they renew.
    version: 6,
    sql: `
      ALTER TABLE nodes ADD COLUMN holder TEXT;
    `,
  },
  {
    // PostgreSQL's version 7 takes secrets' sealed values from the VM hosts' role. SQLite has no
    // roles (it serves a single host): nothing changes, and the two stores keep one numbering.
    version: 7,
    sql: `
      SELECT 1;
    `,
  },
  {
    // Templates (docs/templates.md): environments users bring, built into a root disk, which
    // creates fork from. Their source, failure and config are JSON; their disk counts towards the
    // tenant's own limits, which tenant_limits now holds too.
    version: 8,
    sql: `
      CREATE TABLE templates (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        display_name TEXT NOT NULL,
        state TEXT NOT NULL,
        source TEXT NOT NULL,
        failure TEXT,
        config TEXT,
        disk_bytes INTEGER,
        node TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        UNIQUE (tenant_id, display_name)
      );
      CREATE INDEX templates_tenant ON templates (tenant_id, seq);
      ALTER TABLE tenant_limits ADD COLUMN templates INTEGER;
      ALTER TABLE tenant_limits ADD COLUMN template_gib INTEGER;
    `,
  },
  {
    // A runtime created from a template (docs/templates.md) names it, and so do its checkpoints
    // and their forks: their disks stand on the template's, their execs default to its ENV and WORKDIR.
    version: 9,
    sql: `
      ALTER TABLE runtimes ADD COLUMN template_id TEXT;
      ALTER TABLE checkpoints ADD COLUMN template_id TEXT;
    `,
  },
  {
    // What each VM host holds (docs/scaling.md, "Placement"), kept by the database with every
    // write of a runtime, so that a create's placement reads one row per host instead of summing
    // every runtime of the fleet. The statuses that hold a VM are LIVE_STATUSES
    // (src/core/lifecycle.ts), written out here: a change to that list is a migration. The store
    // contract tests compare these counts with a sum over the runtimes after every kind of write.
    version: 10,
    sql: `
      CREATE TABLE node_holdings (
        node TEXT PRIMARY KEY,
        runtimes INTEGER NOT NULL,
        vcpus INTEGER NOT NULL,
        memory_mib INTEGER NOT NULL
      );
      INSERT INTO node_holdings (node, runtimes, vcpus, memory_mib)
        SELECT node, count(*), coalesce(sum(CASE WHEN r.status IN ('running', 'paused', 'creating') THEN json_extract(r.resources, '$.vcpus') ELSE 0 END), 0), coalesce(sum(CASE WHEN r.status IN ('running', 'paused', 'creating') THEN json_extract(r.resources, '$.limits.memory_mib') ELSE 0 END), 0)
        FROM runtimes r WHERE node IS NOT NULL GROUP BY node;
      CREATE TRIGGER runtimes_held_insert AFTER INSERT ON runtimes WHEN NEW.node IS NOT NULL BEGIN
        INSERT INTO node_holdings (node, runtimes, vcpus, memory_mib)
          VALUES (NEW.node, 1, CASE WHEN NEW.status IN ('running', 'paused', 'creating') THEN json_extract(NEW.resources, '$.vcpus') ELSE 0 END, CASE WHEN NEW.status IN ('running', 'paused', 'creating') THEN json_extract(NEW.resources, '$.limits.memory_mib') ELSE 0 END)
          ON CONFLICT (node) DO UPDATE SET runtimes = runtimes + 1, vcpus = vcpus + excluded.vcpus, memory_mib = memory_mib + excluded.memory_mib;
      END;
      CREATE TRIGGER runtimes_held_delete AFTER DELETE ON runtimes WHEN OLD.node IS NOT NULL BEGIN
        UPDATE node_holdings SET runtimes = runtimes - 1, vcpus = vcpus - (CASE WHEN OLD.status IN ('running', 'paused', 'creating') THEN json_extract(OLD.resources, '$.vcpus') ELSE 0 END), memory_mib = memory_mib - (CASE WHEN OLD.status IN ('running', 'paused', 'creating') THEN json_extract(OLD.resources, '$.limits.memory_mib') ELSE 0 END)
          WHERE node = OLD.node;
      END;
      CREATE TRIGGER runtimes_held_update AFTER UPDATE OF node, status, resources ON runtimes BEGIN
        UPDATE node_holdings SET runtimes = runtimes - 1, vcpus = vcpus - (CASE WHEN OLD.status IN ('running', 'paused', 'creating') THEN json_extract(OLD.resources, '$.vcpus') ELSE 0 END), memory_mib = memory_mib - (CASE WHEN OLD.status IN ('running', 'paused', 'creating') THEN json_extract(OLD.resources, '$.limits.memory_mib') ELSE 0 END)
          WHERE node = OLD.node;
        INSERT INTO node_holdings (node, runtimes, vcpus, memory_mib)
          SELECT NEW.node, 1, CASE WHEN NEW.status IN ('running', 'paused', 'creating') THEN json_extract(NEW.resources, '$.vcpus') ELSE 0 END, CASE WHEN NEW.status IN ('running', 'paused', 'creating') THEN json_extract(NEW.resources, '$.limits.memory_mib') ELSE 0 END WHERE NEW.node IS NOT NULL
          ON CONFLICT (node) DO UPDATE SET runtimes = runtimes + 1, vcpus = vcpus + excluded.vcpus, memory_mib = memory_mib + excluded.memory_mib;
      END;
    `,
  },
  {
    // A runtime's environment, set at create (docs/api.md, "Environment"): every exec, process
    // and terminal gets it, over its template's ENV.
    version: 11,
    sql: `
      ALTER TABLE runtimes ADD COLUMN env TEXT NOT NULL DEFAULT '{}';
    `,
  },
  {
    // A template built from a Dockerfile (docs/templates.md, "Dockerfile builds") is the checkpoint
    // of its last build step, which its runtimes fork.
    version: 12,
    sql: `
      ALTER TABLE templates ADD COLUMN checkpoint_id TEXT;
    `,
  },
  {
    // Checkpoints in object storage (docs/scaling.md, "Object storage"): the digest of each one's
    // record in the bucket, once it is stored; a restore reads back only that record.
    version: 13,
    sql: `
      ALTER TABLE checkpoints ADD COLUMN archive_digest TEXT;
    `,
  },
];
