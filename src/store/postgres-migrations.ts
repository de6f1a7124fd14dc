/**
 * The PostgreSQL schema, versioned like the SQLite one (src/store/migrations.ts): version N here
 * holds the same tables, columns and constraints as version N there, so that a column added
 * later is one migration in each list at the same version. Append only: a released migration is
 * never edited.
 *
 * Where SQLite trusts the core, PostgreSQL also has the database enforce it, because several API
 * processes share it: an injection rule needs its runtime (and goes with it) and its secret (which
 * cannot go while the rule holds it).
 */
export const PG_MIGRATIONS: ReadonlyArray<{ version: number; sql: string }> = [
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
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
        CONSTRAINT runtimes_name UNIQUE (tenant_id, display_name)
      );
      CREATE TABLE secrets (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        display_name TEXT NOT NULL,
        cache_ttl_secs INTEGER NOT NULL,
        sealed_value TEXT NOT NULL,
        created_at TEXT NOT NULL,
        CONSTRAINT secrets_name UNIQUE (tenant_id, display_name)
      );
      CREATE TABLE injection_rules (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        runtime_id TEXT NOT NULL CONSTRAINT injection_rules_runtime_fk REFERENCES runtimes (id) ON DELETE CASCADE,
        secret_id TEXT NOT NULL CONSTRAINT injection_rules_secret_fk REFERENCES secrets (id),
        host_pattern TEXT NOT NULL,
        path_pattern TEXT NOT NULL,
        injection TEXT NOT NULL,
        created_at TEXT NOT NULL
      );
      CREATE INDEX injection_rules_runtime ON injection_rules (runtime_id);
      CREATE INDEX injection_rules_secret ON injection_rules (secret_id);
      CREATE TABLE checkpoints (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
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
    version: 2,
    sql: `
      ALTER TABLE checkpoints ADD COLUMN disk_bytes BIGINT;
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
    // Labels and lifecycle settings of runtimes (SQLite's version 3); and tokens are listed a page
    // at a time, newest first, which SQLite does on its rowid.
    version: 3,
    sql: `
      ALTER TABLE tokens ADD COLUMN seq BIGINT GENERATED ALWAYS AS IDENTITY;
      CREATE INDEX tokens_tenant ON tokens (tenant_id, seq);
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
    // The fleet's VM hosts and where runtimes and checkpoints live (SQLite's version 4). Leases
    // are timestamptz, set and compared by the database's clock alone: hosts' clocks may disagree.
    version: 4,
    sql: `
      CREATE TABLE nodes (
        name TEXT PRIMARY KEY,
        internal_url TEXT NOT NULL,
        ingress_address TEXT,
        memory_mib INTEGER NOT NULL,
        vcpus INTEGER NOT NULL,
        runtimes INTEGER NOT NULL,
        disk_bytes BIGINT NOT NULL,
        draining BOOLEAN NOT NULL DEFAULT false,
        lease_expires_at TIMESTAMPTZ NOT NULL,
        registered_at TIMESTAMPTZ NOT NULL
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
    // VM hosts no longer read secrets' sealed values: an API node opens a secret for a host
    // (docs/scaling.md, "Secrets on VM hosts"). Applying this grants the hosts' role again, as
    // every migration does, now without that column.
    version: 7,
    sql: `
      COMMENT ON COLUMN secrets.sealed_value IS 'sealed with the master key; the VM hosts'' role may not read it';
    `,
  },
  {
    // Templates and their limits (SQLite's version 8).
    version: 8,
    sql: `
      CREATE TABLE templates (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        display_name TEXT NOT NULL,
        state TEXT NOT NULL,
        source TEXT NOT NULL,
        failure TEXT,
        config TEXT,
        disk_bytes BIGINT,
        node TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL,
        CONSTRAINT templates_name UNIQUE (tenant_id, display_name)
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
        runtimes BIGINT NOT NULL,
        vcpus NUMERIC NOT NULL,
        memory_mib NUMERIC NOT NULL
      );
      INSERT INTO node_holdings (node, runtimes, vcpus, memory_mib)
        SELECT node, count(*), coalesce(sum(CASE WHEN r.status IN ('running', 'paused', 'creating') THEN (r.resources::jsonb ->> 'vcpus')::numeric ELSE 0 END), 0), coalesce(sum(CASE WHEN r.status IN ('running', 'paused', 'creating') THEN (r.resources::jsonb -> 'limits' ->> 'memory_mib')::numeric ELSE 0 END), 0)
        FROM runtimes r WHERE node IS NOT NULL GROUP BY node;
      -- Runs as the tables' owner: a VM host's role writes runtimes, never these counts directly.
      -- So nobody else may attach it to a table of theirs (EXECUTE is checked when a trigger is
      -- made, and a temporary table of a host's would do), it refuses any table but runtimes, and
      -- its names resolve in this schema, with pg_temp last so a temporary table cannot stand in.
      -- The two hosts of a move are changed in name order, so that two opposite moves at once
      -- cannot deadlock on each other's rows.
      CREATE FUNCTION runtimes_held_change() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
      DECLARE
        old_first boolean := TG_OP = 'DELETE' OR (TG_OP = 'UPDATE' AND coalesce(NEW.node IS NULL OR OLD.node <= NEW.node, true));
        pass integer;
      BEGIN
        IF TG_RELID <> 'runtimes'::regclass THEN
          RAISE EXCEPTION 'runtimes_held_change keeps the holdings of runtimes alone';
        END IF;
        FOR pass IN 1..2 LOOP
          IF (pass = 1) = old_first AND TG_OP <> 'INSERT' AND OLD.node IS NOT NULL THEN
            UPDATE node_holdings SET runtimes = runtimes - 1, vcpus = vcpus - (CASE WHEN OLD.status IN ('running', 'paused', 'creating') THEN (OLD.resources::jsonb ->> 'vcpus')::numeric ELSE 0 END), memory_mib = memory_mib - (CASE WHEN OLD.status IN ('running', 'paused', 'creating') THEN (OLD.resources::jsonb -> 'limits' ->> 'memory_mib')::numeric ELSE 0 END)
              WHERE node = OLD.node;
          ELSIF (pass = 1) <> old_first AND TG_OP <> 'DELETE' AND NEW.node IS NOT NULL THEN
            INSERT INTO node_holdings AS h (node, runtimes, vcpus, memory_mib)
              VALUES (NEW.node, 1, CASE WHEN NEW.status IN ('running', 'paused', 'creating') THEN (NEW.resources::jsonb ->> 'vcpus')::numeric ELSE 0 END, CASE WHEN NEW.status IN ('running', 'paused', 'creating') THEN (NEW.resources::jsonb -> 'limits' ->> 'memory_mib')::numeric ELSE 0 END)
              ON CONFLICT (node) DO UPDATE SET runtimes = h.runtimes + 1, vcpus = h.vcpus + EXCLUDED.vcpus, memory_mib = h.memory_mib + EXCLUDED.memory_mib;
          END IF;
        END LOOP;
        RETURN NULL;
      END
      $$;
      DO $$ BEGIN
        EXECUTE format('ALTER FUNCTION runtimes_held_change() SET search_path = %I, pg_temp', current_schema());
      END $$;
      REVOKE EXECUTE ON FUNCTION runtimes_held_change() FROM PUBLIC;
      CREATE TRIGGER runtimes_held AFTER INSERT OR DELETE OR UPDATE OF node, status, resources ON runtimes
        FOR EACH ROW EXECUTE FUNCTION runtimes_held_change();
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
