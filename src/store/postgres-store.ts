/**
 * The networked store: PostgreSQL through node-postgres (`pg`), for several API processes on one
 * database. Same tables and row mapping as the SQLite store (src/store/rows.ts); what differs is
 * what a shared database needs: migrations under an advisory lock, transactions where SQLite's
 * single writer made them implicit, and no row cache (another process may delete the row).
 */
import { createHash } from 'node:crypto';
import pg from 'pg';
import { alreadyExists, failedPrecondition, notFound } from '../core/errors.js';
import { LIVE_STATUSES, STOPPED_STATUSES } from '../core/lifecycle.js';
import { isUuid } from '../core/names.js';
import type { AuditRepo, CheckpointRepo, NodeRepo, QuotaRepo, RuleRepo, SecretRepo, Store, TenantRepo, TokenRepo } from '../core/ports.js';
import type { NodeLoad, Page, PageRequest, Runtime, RuntimeFilter, SealedSecret, Secret, Template, TenantLimits } from '../core/types.js';
import { PG_MIGRATIONS } from './postgres-migrations.js';
import { HOST_ROLE_SETTING, grantHostRole } from './postgres-host-role.js';
import {
  AUDIT_COLUMNS,
  CHECKPOINT_COLUMNS,
  LIMIT_COLUMNS,
  LIMIT_NAMES,
  NODE_REGISTRATION_COLUMNS,
  RULE_COLUMNS,
  RUNTIME_COLUMNS,
  SEALED_SECRET_COLUMNS,
  SECRET_COLUMNS,
  TEMPLATE_COLUMNS,
  TOKEN_COLUMNS,
  auditFromRow,
  auditToRow,
  checkpointFromRow,
  checkpointToRow,
  checkLeaseSecs,
  credentialKey,
  nameHeld,
  decodePageToken,
  nodeFromRow,
  nodeRegistrationToRow,
  numOrNull,
  page,
  ruleFromRow,
  ruleToRow,
  runtimeFromRow,
  runtimeToRow,
  sealedSecretFromRow,
  sealedSecretToRow,
  secretFromRow,
  templateFromRow,
  templateToRow,
  tokenFromRow,
  tokenToRow,
  type Row,
  strOrNull,
} from './rows.js';

/** Anything that runs a query: the pool, or one client inside a transaction. */
type Queryable = Pick<pg.Pool | pg.PoolClient, 'query'>;

/**
 * A statement with a name derived from its text: node-postgres then prepares it once per
 * connection and afterwards sends only the parameters, as the SQLite store's prepared statements do.
 */
class Sql {
  readonly name: string;
  constructor(readonly text: string) {
    this.name = 'v_' + createHash('sha256').update(text).digest('hex').slice(0, 24);
  }
  async rows(db: Queryable, values: unknown[] = []): Promise<Row[]> {
    return (await db.query<Row>({ name: this.name, text: this.text, values })).rows;
  }
  async one(db: Queryable, values: unknown[] = []): Promise<Row | undefined> {
    return (await this.rows(db, values))[0];
  }
  async count(db: Queryable, values: unknown[] = []): Promise<number> {
    return (await db.query({ name: this.name, text: this.text, values })).rowCount ?? 0;
  }
}

/** The advisory lock key that migrations run under: any bigint, the same in every Vessel process. */
const MIGRATION_LOCK_KEY = 0x7665_7373_656c; // "vessel"

const pgCode = (err: unknown): string | undefined => (typeof err === 'object' && err !== null && 'code' in err ? String(err.code) : undefined);
const pgConstraint = (err: unknown): string | undefined =>
  typeof err === 'object' && err !== null && 'constraint' in err ? String(err.constraint) : undefined;
const UNIQUE_VIOLATION = '23505';
const INSUFFICIENT_PRIVILEGE = '42501';
const FOREIGN_KEY_VIOLATION = '23503';

/** Runs `work` in one transaction on one client of the pool; rolled back when it throws. */
async function inTransaction<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await work(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** The schema's version, or 0 when it has none yet: read with nothing but SELECT. */
async function schemaVersion(client: pg.PoolClient): Promise<number> {
  const table = await client.query<{ t: string | null }>("SELECT to_regclass('schema_migrations')::text AS t");
  if (table.rows[0]?.t == null) return 0;
  const { rows } = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations');
  return rows[0]?.v ?? 0;
}

/**
 * Applies the migrations not yet recorded, each in its own transaction, under a session advisory
 * lock: a second process starting at the same moment waits on the lock, then finds them recorded.
 * A schema already current is only read: a VM host's role (postgres-host-role.ts) may change none
 * of it, and starts as long as an API node of its version migrated first.
 */
export async function migratePostgres(pool: pg.Pool): Promise<void> {
  const client = await pool.connect();
  const latest = PG_MIGRATIONS.at(-1)!.version;
  let current = 0;
  try {
    current = await schemaVersion(client);
    if (current >= latest) return;
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
      const { rows } = await client.query<{ v: number | null }>('SELECT max(version) AS v FROM schema_migrations');
      current = rows[0]?.v ?? 0;
      for (const m of PG_MIGRATIONS) {
        if (m.version <= current) continue;
        await client.query('BEGIN');
        try {
          await client.query(m.sql);
          await client.query('INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)', [m.version, new Date().toISOString()]);
          // New tables get the VM hosts' privileges with the migration that makes them.
          const role = m.version >= 5 ? (await client.query<{ value: string }>('SELECT value FROM fleet_settings WHERE name = $1', [HOST_ROLE_SETTING])).rows[0]?.value : undefined;
          if (role !== undefined) await grantHostRole(client, role);
          await client.query('COMMIT');
        } catch (err) {
          await client.query('ROLLBACK').catch(() => undefined);
          throw err;
        }
      }
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
    }
  } catch (err) {
    if (pgCode(err) !== INSUFFICIENT_PRIVILEGE) throw err;
    throw new Error(`the database schema is at version ${current} and this role may not migrate it to ${latest} (${(err as Error).message}): start an API node of this version first, which migrates it as the tables' owner`);
  } finally {
    client.release();
  }
}

const placeholders = (n: number, from = 1): string => Array.from({ length: n }, (_, i) => `$${i + from}`).join(', ');
const valuesOf = (row: Row, columns: string[]): unknown[] => columns.map((c) => row[c]);

/**
 * Tenant-owned records named by display_name, as the SQLite store's TenantTable. `columns` starts
 * with id. Written as T; read as R, from the columns `select` names (all by default): a table
 * whose readers may not all see every column (secrets) names those they may.
 */
class PgTenantTable<T extends { id: string; tenantId: string; displayName: string }, R = T> {
  readonly #insert: Sql;
  readonly #update: Sql;
  readonly #findId: Sql;
  readonly #findName: Sql;
  readonly #findById: Sql;
  readonly #list: Sql;
  readonly #all: Sql;
  readonly #delete: Sql;

  constructor(
    protected readonly db: pg.Pool,
    private readonly kind: string,
    table: string,
    private readonly columns: string[],
    private readonly toRow: (r: T) => Row,
    readonly fromRow: (r: Row) => R,
    select = '*',
  ) {
    if (columns[0] !== 'id') throw new Error(`${table}: the first column must be id`);
    this.#insert = new Sql(`INSERT INTO ${table} (${columns.join(', ')}) VALUES (${placeholders(columns.length)})`);
    this.#update = new Sql(`UPDATE ${table} SET ${columns.slice(1).map((c, i) => `${c} = $${i + 2}`).join(', ')} WHERE id = $1`);
    this.#findId = new Sql(`SELECT ${select} FROM ${table} WHERE id = $1 AND tenant_id = $2`);
    this.#findName = new Sql(`SELECT ${select} FROM ${table} WHERE tenant_id = $1 AND display_name = $2`);
    this.#findById = new Sql(`SELECT ${select} FROM ${table} WHERE id = $1`);
    this.#list = new Sql(`SELECT ${select} FROM ${table} WHERE tenant_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3`);
    this.#all = new Sql(`SELECT ${select} FROM ${table} ORDER BY seq`);
    this.#delete = new Sql(`DELETE FROM ${table} WHERE tenant_id = $1 AND id = $2`);
  }

  async #write(statement: Sql, record: T): Promise<void> {
    try {
      await statement.rows(this.db, valuesOf(this.toRow(record), this.columns));
    } catch (err) {
      if (pgCode(err) === UNIQUE_VIOLATION) throw alreadyExists(this.kind, record.displayName);
      throw err;
    }
  }

  insert = (record: T): Promise<void> => this.#write(this.#insert, record);
  update = (record: T): Promise<void> => this.#write(this.#update, record);

  async find(tenantId: string, ref: string): Promise<R | undefined> {
    const row = isUuid(ref) ? await this.#findId.one(this.db, [ref.toLowerCase(), tenantId]) : await this.#findName.one(this.db, [tenantId, ref]);
    return row === undefined ? undefined : this.fromRow(row);
  }

  async findById(id: string): Promise<R | undefined> {
    const row = await this.#findById.one(this.db, [id]);
    return row === undefined ? undefined : this.fromRow(row);
  }

  async list(tenantId: string, p: PageRequest): Promise<Page<R>> {
    return page(await this.#list.rows(this.db, [tenantId, decodePageToken(p.pageToken), p.limit + 1]), p.limit, this.fromRow);
  }

  async listAll(): Promise<R[]> {
    return (await this.#all.rows(this.db)).map(this.fromRow);
  }

  /** A runtime's injection rules go with it in the same statement (ON DELETE CASCADE). */
  async delete(tenantId: string, id: string): Promise<boolean> {
    try {
      return (await this.#delete.count(this.db, [tenantId, id])) > 0;
    } catch (err) {
      // A secret that an injection rule created meanwhile, on another API process, still holds.
      if (pgCode(err) === FOREIGN_KEY_VIOLATION) throw failedPrecondition(`${this.kind} '${id}' is in use; delete what uses it first`);
      throw err;
    }
  }
}

/**
 * Secrets: read without their sealed value, which only findSealed selects. A VM host's role may
 * select every column but that one (postgres-host-role.ts), so what a host runs never names it.
 */
class PgSecretTable extends PgTenantTable<SealedSecret, Secret> implements SecretRepo {
  readonly #sealed = new Sql(`SELECT ${SEALED_SECRET_COLUMNS.join(', ')} FROM secrets WHERE id = $1 AND tenant_id = $2`);

  constructor(db: pg.Pool) {
    super(db, 'secret', 'secrets', SEALED_SECRET_COLUMNS, sealedSecretToRow, secretFromRow, ['seq', ...SECRET_COLUMNS].join(', '));
  }

  async findSealed(tenantId: string, id: string): Promise<SealedSecret | undefined> {
    if (!isUuid(id)) return undefined;
    const row = await this.#sealed.one(this.db, [id.toLowerCase(), tenantId]);
    return row === undefined ? undefined : sealedSecretFromRow(row);
  }
}

export interface PostgresStoreOptions {
  /** Connections this process keeps at most. */
  poolSize?: number;
  /** An idle connection that fails (the server restarted, say); the pool replaces it. */
  onIdleError?: (err: Error) => void;
}

/**
 * Runtimes add lists by label and status, filtered in the query so that a page holds `limit`
 * matches (as on SQLite): the statuses (empty keeps all), and label selectors as [key, value or
 * null] pairs, each of which the runtime's labels must hold.
 */
class PgRuntimeTable extends PgTenantTable<Runtime> implements TenantRepo<Runtime> {
  readonly #matching = new Sql(
    `SELECT * FROM runtimes r WHERE tenant_id = $1 AND seq < $2
       AND (cardinality($3::text[]) = 0 OR status = ANY($3::text[]))
       AND NOT EXISTS (
         SELECT 1 FROM jsonb_array_elements($4::jsonb) s(sel) WHERE NOT (
           CASE WHEN jsonb_typeof(sel->1) = 'null' THEN r.labels::jsonb ? (sel->>0)
                ELSE r.labels::jsonb @> jsonb_build_object(sel->>0, sel->>1) END))
     ORDER BY seq DESC LIMIT $5`,
  );
  readonly #timed = new Sql(
    `SELECT * FROM runtimes WHERE node IS NOT DISTINCT FROM $2 AND (status = 'running' OR (auto_delete_secs IS NOT NULL AND stopped_at IS NOT NULL AND status = ANY($1::text[]))) ORDER BY seq`,
  );

  readonly #handOver = new Sql(
    `UPDATE runtimes SET node = $5, status_message = $6, updated_at = $7
     WHERE id = $1 AND node = $2 AND updated_at = $3 AND status != $4 RETURNING id`,
  );

  constructor(db: pg.Pool) {
    super(db, 'runtime', 'runtimes', RUNTIME_COLUMNS, runtimeToRow, runtimeFromRow);
  }

  async listMatching(tenantId: string, filter: RuntimeFilter, p: PageRequest): Promise<Page<Runtime>> {
    const rows = await this.#matching.rows(this.db, [tenantId, decodePageToken(p.pageToken), filter.statuses, JSON.stringify(filter.labels), p.limit + 1]);
    return page(rows, p.limit, this.fromRow);
  }

  async listTimed(node: string | null): Promise<Runtime[]> {
    return (await this.#timed.rows(this.db, [STOPPED_STATUSES, node])).map(this.fromRow);
  }

  async handOver(id: string, expected: { node: string; updatedAt: string }, next: { node: string; statusMessage: string | null; updatedAt: string }): Promise<boolean> {
    const params = [id, expected.node, expected.updatedAt, 'deleting', next.node, next.statusMessage, next.updatedAt];
    return (await this.#handOver.rows(this.db, params)).length > 0;
  }
}

export class PostgresStore implements Store {
  readonly #pool: pg.Pool;
  #closed = false;
  readonly tokens: TokenRepo;
  readonly runtimes: PgRuntimeTable;
  readonly secrets: PgSecretTable;
  readonly templates: PgTenantTable<Template>;
  readonly rules: RuleRepo;
  readonly checkpoints: CheckpointRepo;
  readonly audits: AuditRepo;
  readonly quotas: QuotaRepo;
  readonly nodes: NodeRepo;

  private constructor(pool: pg.Pool, poolSize: number) {
    this.#pool = pool;
    this.runtimes = new PgRuntimeTable(pool);
    this.secrets = new PgSecretTable(pool);
    this.templates = new PgTenantTable(pool, 'template', 'templates', TEMPLATE_COLUMNS, templateToRow, templateFromRow);
    this.tokens = tokenRepo(pool);
    this.rules = ruleRepo(pool);
    this.checkpoints = checkpointRepo(pool);
    this.audits = auditRepo(pool);
    this.quotas = quotaRepo(pool, poolSize);
    this.nodes = nodeRepo(pool);
  }

  /** Connects and migrates; throws, having closed its connections, when either fails. */
  static async open(connectionString: string, options: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const poolSize = options.poolSize ?? 10;
    const pool = new pg.Pool({ connectionString, max: poolSize });
    // Without a listener, an idle connection's error would end the process.
    pool.on('error', options.onIdleError ?? (() => undefined));
    try {
      await migratePostgres(pool);
    } catch (err) {
      await pool.end();
      throw err;
    }
    return new PostgresStore(pool, poolSize);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#pool.end();
  }
}

function tokenRepo(db: pg.Pool): TokenRepo {
  const insert = new Sql(`INSERT INTO tokens (${TOKEN_COLUMNS.join(', ')}) VALUES (${placeholders(TOKEN_COLUMNS.length)})`);
  const put = new Sql(
    `INSERT INTO tokens (${TOKEN_COLUMNS.join(', ')}) VALUES (${placeholders(TOKEN_COLUMNS.length)})
     ON CONFLICT (id) DO UPDATE SET ${TOKEN_COLUMNS.slice(1).map((c) => `${c} = EXCLUDED.${c}`).join(', ')}`,
  );
  const byHash = new Sql('SELECT * FROM tokens WHERE hash = $1');
  const all = new Sql('SELECT * FROM tokens ORDER BY created_at DESC');
  const revoke = new Sql('UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL');
  const byId = new Sql('SELECT * FROM tokens WHERE id = $1');
  // A null tenant lists every tenant's tokens.
  const pageOf = new Sql('SELECT * FROM tokens WHERE ($1::text IS NULL OR tenant_id = $1) AND seq < $2 ORDER BY seq DESC LIMIT $3');
  return {
    insert: async (t) => void (await insert.rows(db, valuesOf(tokenToRow(t), TOKEN_COLUMNS))),
    put: async (t) => void (await put.rows(db, valuesOf(tokenToRow(t), TOKEN_COLUMNS))),
    findByHash: async (hash) => {
      const row = await byHash.one(db, [hash]);
      return row === undefined ? undefined : tokenFromRow(row);
    },
    findById: async (id) => {
      const row = await byId.one(db, [id]);
      return row === undefined ? undefined : tokenFromRow(row);
    },
    list: async () => (await all.rows(db)).map(tokenFromRow),
    page: async (f) => page(await pageOf.rows(db, [f.tenantId ?? null, decodePageToken(f.pageToken), f.limit + 1]), f.limit, tokenFromRow),
    revoke: async (id, at) => (await revoke.count(db, [at, id])) > 0,
  };
}

function ruleRepo(db: pg.Pool): RuleRepo {
  const insert = new Sql(`INSERT INTO injection_rules (${RULE_COLUMNS.join(', ')}) VALUES (${placeholders(RULE_COLUMNS.length)})`);
  const find = new Sql('SELECT * FROM injection_rules WHERE tenant_id = $1 AND id = $2');
  const list = new Sql('SELECT * FROM injection_rules WHERE tenant_id = $1 AND seq < $2 ORDER BY seq DESC LIMIT $3');
  const listRt = new Sql('SELECT * FROM injection_rules WHERE tenant_id = $1 AND runtime_id = $2 AND seq < $3 ORDER BY seq DESC LIMIT $4');
  const forRuntime = new Sql('SELECT * FROM injection_rules WHERE runtime_id = $1 ORDER BY seq');
  const countSecret = new Sql('SELECT count(*) AS n FROM injection_rules WHERE secret_id = $1');
  // The runtime must be the rule's tenant's: a row that says otherwise was not made by the API.
  const secretOnNode = new Sql('SELECT 1 FROM injection_rules r JOIN runtimes rt ON rt.id = r.runtime_id AND rt.tenant_id = r.tenant_id WHERE r.tenant_id = $1 AND r.secret_id = $2 AND rt.node = $3 LIMIT 1');
  const del = new Sql('DELETE FROM injection_rules WHERE tenant_id = $1 AND id = $2');
  const delRt = new Sql('DELETE FROM injection_rules WHERE runtime_id = $1');
  return {
    insert: async (r) => {
      try {
        await insert.rows(db, valuesOf(ruleToRow(r), RULE_COLUMNS));
      } catch (err) {
        // The runtime or the secret was deleted, by another API process, since the core found it.
        if (pgCode(err) === FOREIGN_KEY_VIOLATION) {
          throw pgConstraint(err) === 'injection_rules_secret_fk' ? notFound('secret', r.secretId) : notFound('runtime', r.runtimeId);
        }
        throw err;
      }
    },
    find: async (tenantId, id) => {
      const row = await find.one(db, [tenantId, id.toLowerCase()]);
      return row === undefined ? undefined : ruleFromRow(row);
    },
    list: async (tenantId, p, runtimeId) => {
      const after = decodePageToken(p.pageToken);
      const rows = runtimeId === undefined ? await list.rows(db, [tenantId, after, p.limit + 1]) : await listRt.rows(db, [tenantId, runtimeId, after, p.limit + 1]);
      return page(rows, p.limit, ruleFromRow);
    },
    listForRuntime: async (runtimeId) => (await forRuntime.rows(db, [runtimeId])).map(ruleFromRow),
    countForSecret: async (secretId) => Number((await countSecret.one(db, [secretId]))!.n),
    namesSecretOnNode: async (tenantId, secretId, node) => (await secretOnNode.one(db, [tenantId, secretId, node])) !== undefined,
    delete: async (tenantId, id) => (await del.count(db, [tenantId, id])) > 0,
    deleteForRuntime: async (runtimeId) => delRt.count(db, [runtimeId]),
  };
}

function checkpointRepo(db: pg.Pool): CheckpointRepo {
  const cols = CHECKPOINT_COLUMNS;
  if (cols[0] !== 'id') throw new Error('checkpoints: the first column must be id');
  const insert = new Sql(`INSERT INTO checkpoints (${cols.join(', ')}) VALUES (${placeholders(cols.length)})`);
  const update = new Sql(`UPDATE checkpoints SET ${cols.slice(1).map((c, i) => `${c} = $${i + 2}`).join(', ')} WHERE id = $1`);
  const visible = '(tenant_id = $1 OR ($2::boolean AND tenant_id IS NULL)) AND deleted = 0';
  const find = new Sql(`SELECT * FROM checkpoints WHERE ${visible} AND (id = $3 OR display_name = $4) ORDER BY (id = $3) DESC, (tenant_id IS NULL) LIMIT 1`);
  const list = new Sql(`SELECT * FROM checkpoints WHERE ${visible} AND seq < $3 ORDER BY seq DESC LIMIT $4`);
  const all = new Sql('SELECT * FROM checkpoints ORDER BY seq');
  const purge = new Sql('DELETE FROM checkpoints WHERE id = $1');
  const move = new Sql('UPDATE checkpoints SET node = $3 WHERE id = $1 AND node = $2 AND deleted = 0 RETURNING id');
  const archived = new Sql('UPDATE checkpoints SET archive_digest = $2 WHERE id = $1 AND deleted = 0 RETURNING id');
  const archiveDigest = new Sql('SELECT archive_digest FROM checkpoints WHERE id = $1');
  const unarchived = new Sql(`SELECT id FROM checkpoints WHERE node IS NOT DISTINCT FROM $1 AND state = 'ready' AND deleted = 0 AND tenant_id IS NOT NULL AND archive_digest IS NULL ORDER BY seq`);
  const write = async (statement: Sql, c: Parameters<CheckpointRepo['insert']>[0]) => {
    try {
      await statement.rows(db, valuesOf(checkpointToRow(c), cols));
    } catch (err) {
      if (pgCode(err) === UNIQUE_VIOLATION) throw alreadyExists('checkpoint', c.displayName);
      throw err;
    }
  };
  return {
    insert: (c) => write(insert, c),
    update: (c) => write(update, c),
    find: async (tenantId, ref, includeSystem = false) => {
      const row = await find.one(db, [tenantId, includeSystem, ref.toLowerCase(), ref]);
      return row === undefined ? undefined : checkpointFromRow(row);
    },
    list: async (tenantId, p, includeSystem) =>
      page(await list.rows(db, [tenantId, includeSystem, decodePageToken(p.pageToken), p.limit + 1]), p.limit, checkpointFromRow),
    listAll: async () => (await all.rows(db)).map(checkpointFromRow),
    moveNode: async (id, from, to) => (await move.rows(db, [id, from, to])).length > 0,
    purge: async (id) => void (await purge.rows(db, [id])),
    setArchived: async (id, digest) => (await archived.rows(db, [id, digest])).length > 0,
    archiveDigest: async (id) => strOrNull((await archiveDigest.one(db, [id]))?.archive_digest ?? null),
    listUnarchived: async (node) => (await unarchived.rows(db, [node])).map((r) => String(r.id)),
  };
}

function auditRepo(db: pg.Pool): AuditRepo {
  // One statement for the whole batch, so it is stored whole or not at all; WITH ORDINALITY keeps
  // the batch's order in seq, which the newest-first listing follows. An audit sent again (its
  // sender did not hear that it was stored) is stored once.
  const insert = new Sql(
    `INSERT INTO audits (${AUDIT_COLUMNS.join(', ')})
     SELECT ${AUDIT_COLUMNS.map((c) => `b.${c}`).join(', ')}
     FROM unnest(${AUDIT_COLUMNS.map((_, i) => `$${i + 1}::text[]`).join(', ')}) WITH ORDINALITY AS b (${AUDIT_COLUMNS.join(', ')}, n)
     ORDER BY b.n
     ON CONFLICT (id) DO NOTHING`,
  );
  const list = new Sql(
    `SELECT * FROM audits WHERE tenant_id = $1 AND ($2::text IS NULL OR category = $2)
       AND ($3::text IS NULL OR runtime_id = $3) AND seq < $4 ORDER BY seq DESC LIMIT $5`,
  );
  // The SQLite store's prune (see there why it walks the indexes with OFFSET). SQLite takes a
  // negative OFFSET as zero; PostgreSQL refuses one, hence greatest().
  const prune = new Sql(
    `WITH cutoff AS (SELECT seq FROM audits WHERE tenant_id = $1 ORDER BY seq DESC LIMIT 1 OFFSET $2),
       floors AS MATERIALIZED (
         SELECT r.id AS runtime_id,
           coalesce((SELECT seq FROM audits WHERE runtime_id = r.id ORDER BY seq DESC LIMIT 1 OFFSET greatest($3::bigint - 1, 0)), -1) AS seq
         FROM runtimes r
         WHERE r.tenant_id = $1 AND EXISTS (SELECT 1 FROM audits WHERE runtime_id = r.id AND seq <= (SELECT seq FROM cutoff)))
     DELETE FROM audits
     WHERE tenant_id = $1 AND seq <= (SELECT seq FROM cutoff)
       AND seq < coalesce((SELECT seq FROM floors WHERE floors.runtime_id = audits.runtime_id), ${Number.MAX_SAFE_INTEGER})`,
  );
  return {
    insert: async (audits) => {
      if (audits.length === 0) return;
      const rows = audits.map(auditToRow);
      await insert.rows(db, AUDIT_COLUMNS.map((c) => rows.map((r) => r[c])));
    },
    list: async (tenantId, f) =>
      page(await list.rows(db, [tenantId, f.category ?? null, f.runtimeId ?? null, decodePageToken(f.pageToken), f.limit + 1]), f.limit, auditFromRow),
    prune: (tenantIds, retention) =>
      inTransaction(db, async (client) => {
        let deleted = 0;
        for (const tenant of tenantIds) deleted += await prune.count(client, [tenant, retention.perTenant, retention.perRuntime]);
        return deleted;
      }),
  };
}

/**
 * What a tenant's runtimes hold: how many, and the vCPUs and memory limits of those with a VM
 * (LIVE_STATUSES, bound as $2, a text[] parameter). A host's holdings follow the same rule, kept
 * by a trigger (migration 10).
 */
const TENANT_HOLDINGS = `SELECT count(*) AS runtimes,
     coalesce(sum((resources::jsonb ->> 'vcpus')::numeric) FILTER (WHERE status = ANY($2::text[])), 0) AS vcpus,
     coalesce(sum((resources::jsonb -> 'limits' ->> 'memory_mib')::numeric) FILTER (WHERE status = ANY($2::text[])), 0) AS memory_mib
   FROM runtimes WHERE tenant_id = $1`;

function quotaRepo(db: pg.Pool, poolSize: number): QuotaRepo {
  const admissions = new AdmissionLocks(db, poolSize);
  const runtimeUsage = new Sql(TENANT_HOLDINGS);
  const checkpointUsage = new Sql(
    `SELECT count(*) AS checkpoints, coalesce(sum(disk_bytes) FILTER (WHERE state = 'ready'), 0) AS bytes
     FROM checkpoints WHERE tenant_id = $1 AND deleted = 0`,
  );
  const templateUsage = new Sql(
    `SELECT count(*) AS templates, coalesce(sum(disk_bytes) FILTER (WHERE state = 'ready'), 0) AS bytes FROM templates WHERE tenant_id = $1`,
  );
  const live = [...LIVE_STATUSES];
  const limitColumns = LIMIT_NAMES.map((n) => LIMIT_COLUMNS[n]);
  const find = new Sql('SELECT * FROM tenant_limits WHERE tenant_id = $1');
  // The row is made first, if missing, so that FOR UPDATE has a row to lock: two processes
  // changing one tenant's limits at once then merge one after the other instead of losing one.
  const ensure = new Sql('INSERT INTO tenant_limits (tenant_id, updated_at) VALUES ($1, $2) ON CONFLICT (tenant_id) DO NOTHING');
  const lock = new Sql('SELECT * FROM tenant_limits WHERE tenant_id = $1 FOR UPDATE');
  const put = new Sql(`UPDATE tenant_limits SET ${limitColumns.map((c, i) => `${c} = $${i + 2}`).join(', ')}, updated_at = $${limitColumns.length + 2} WHERE tenant_id = $1`);
  const remove = new Sql('DELETE FROM tenant_limits WHERE tenant_id = $1');
  const limitsOf = (row: Row | undefined): Partial<TenantLimits> => {
    const set: Partial<TenantLimits> = {};
    for (const name of LIMIT_NAMES) {
      const value = numOrNull(row?.[LIMIT_COLUMNS[name]]);
      if (value !== null) set[name] = value;
    }
    return set;
  };
  return {
    usage: async (tenantId) => {
      const r = (await runtimeUsage.one(db, [tenantId, live]))!;
      const c = (await checkpointUsage.one(db, [tenantId]))!;
      const t = (await templateUsage.one(db, [tenantId]))!;
      return {
        runtimes: Number(r.runtimes),
        vcpus: Number(r.vcpus),
        memoryMib: Number(r.memory_mib),
        checkpoints: Number(c.checkpoints),
        checkpointBytes: Number(c.bytes),
        templates: Number(t.templates),
        templateBytes: Number(t.bytes),
      };
    },
    overrides: async (tenantId) => limitsOf(await find.one(db, [tenantId])),
    setOverrides: (tenantId, changes) =>
      inTransaction(db, async (client) => {
        const at = new Date().toISOString();
        await ensure.rows(client, [tenantId, at]);
        const current = limitsOf(await lock.one(client, [tenantId]));
        const merged = LIMIT_NAMES.map((name) => (changes[name] === undefined ? (current[name] ?? null) : changes[name]));
        if (merged.every((v) => v === null)) await remove.rows(client, [tenantId]);
        else await put.rows(client, [tenantId, ...merged, at]);
      }),
    exclusive: (tenantId, work) => admissions.run(tenantId, work),
  };
}

/** The class of the advisory locks on tenants' admissions (the key's first half; the tenant's hash is the second). */
const ADMISSION_LOCK_CLASS = 0x7673_6c71; // "vslq"

/**
 * Quota admissions, one at a time per tenant across every process on the database: a session
 * advisory lock on the tenant, held on a connection of its own while the work runs on others.
 * At most half the pool holds such locks at once, so that the work always finds a connection.
 * The lock goes with its connection if that breaks; a hash collision between two tenants only
 * makes their admissions wait for each other.
 */
class AdmissionLocks {
  #held = 0;
  readonly #waiting: (() => void)[] = [];
  readonly #max: number;

  constructor(
    private readonly db: pg.Pool,
    poolSize: number,
  ) {
    this.#max = Math.max(1, Math.floor(poolSize / 2));
  }

  async run<T>(tenantId: string, work: () => Promise<T>): Promise<T> {
    if (this.#held >= this.#max) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    this.#held++;
    try {
      const client = await this.db.connect();
      let unlocked = false;
      try {
        await client.query('SELECT pg_advisory_lock($1, hashtext($2))', [ADMISSION_LOCK_CLASS, tenantId]);
        try {
          return await work();
        } finally {
          unlocked = await client.query('SELECT pg_advisory_unlock($1, hashtext($2))', [ADMISSION_LOCK_CLASS, tenantId]).then(
            () => true,
            () => false,
          );
        }
      } finally {
        // A connection that may still hold the lock is closed, which releases it.
        client.release(!unlocked);
      }
    } finally {
      this.#held--;
      this.#waiting.shift()?.();
    }
  }
}

/**
 * Leases on the database's clock alone (now()), which every API node and host shares: `alive` is
 * judged in the query, never against this process's clock. Names are listed in byte order
 * (COLLATE "C"), as SQLite lists them, whatever the database's collation.
 */
function nodeRepo(db: pg.Pool): NodeRepo {
  const cols = NODE_REGISTRATION_COLUMNS;
  const node = `*, lease_expires_at > now() AS alive`;
  const renew = new Sql(
    `INSERT INTO nodes (${cols.join(', ')}, lease_expires_at, registered_at)
     VALUES (${placeholders(cols.length)}, now() + $${cols.length + 1}::double precision * interval '1 second', now())
     ON CONFLICT (name) DO UPDATE SET ${[...cols.slice(1), 'lease_expires_at'].map((c) => `${c} = EXCLUDED.${c}`).join(', ')}
     WHERE nodes.holder IS NULL OR nodes.holder = EXCLUDED.holder OR nodes.lease_expires_at <= now()
     RETURNING ${node}`,
  );
  const list = new Sql(`SELECT ${node} FROM nodes ORDER BY name COLLATE "C"`);
  const find = new Sql(`SELECT ${node} FROM nodes WHERE name = $1`);
  const setDraining = new Sql('UPDATE nodes SET draining = $2 WHERE name = $1');
  // The row inserted, or the one that was there before the statement began.
  const shared = new Sql(
    `WITH proposed AS (INSERT INTO fleet_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING RETURNING value)
     SELECT value FROM proposed UNION ALL SELECT value FROM fleet_settings WHERE name = $1 AND NOT EXISTS (SELECT 1 FROM proposed)`,
  );
  // Kept by a trigger on runtimes (migration 10): one row per host, whatever the fleet's size.
  const load = new Sql('SELECT node, runtimes, vcpus, memory_mib FROM node_holdings WHERE runtimes > 0');
  const enroll = new Sql('INSERT INTO fleet_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value');
  const setting = new Sql('SELECT value FROM fleet_settings WHERE name = $1');
  const toNode = (row: Row) => nodeFromRow(row, row.alive === true);
  return {
    renew: async (reg, leaseSecs) => {
      checkLeaseSecs(leaseSecs);
      const row = await renew.one(db, [...valuesOf(nodeRegistrationToRow(reg), cols), leaseSecs]);
      if (row === undefined) throw nameHeld(reg.name, toNode((await find.one(db, [reg.name]))!).leaseExpiresAt);
      return toNode(row);
    },
    list: async () => (await list.rows(db)).map(toNode),
    find: async (name) => {
      const row = await find.one(db, [name]);
      return row === undefined ? undefined : toNode(row);
    },
    setDraining: async (name, draining) => (await setDraining.count(db, [name, draining])) > 0,
    load: async () =>
      new Map(
        (await load.rows(db)).map((r): [string, NodeLoad] => [
          String(r.node),
          { runtimes: Number(r.runtimes), vcpus: Number(r.vcpus), memoryMib: Number(r.memory_mib) },
        ]),
      ),
    shared: async (name, proposed) => {
      // A proposal that lost a race to a transaction not yet committed finds no row in that
      // statement's snapshot; the winner's row is there for the next one.
      for (;;) {
        const row = await shared.one(db, [name, proposed]);
        if (row !== undefined) return String(row.value);
      }
    },
    enroll: async (name, credential) => void (await enroll.rows(db, [credentialKey(name), credential])),
    credential: async (name) => {
      const row = await setting.one(db, [credentialKey(name)]);
      return row === undefined ? undefined : String(row.value);
    },
  };
}
