/**
 * The embedded store: SQLite in the data directory through better-sqlite3, in WAL mode so the
 * CLI can manage tokens while the service runs. Rows are mapped to domain records here and
 * nowhere else.
 */
import { chmodSync } from 'node:fs';
import { Database, type Statement } from './sqlite-driver.js';
import { alreadyExists } from '../core/errors.js';
import { LIVE_STATUSES, STOPPED_STATUSES } from '../core/lifecycle.js';
import { isUuid } from '../core/names.js';
import type { AuditFilter, AuditRepo, AuditRetention, CheckpointRepo, NodeRepo, QuotaRepo, RuleRepo, SecretRepo, Store, TenantLimitOverrides, TenantRepo, TokenFilter, TokenRepo } from '../core/ports.js';
import type { Audit, NodeLoad, Page, PageRequest, Runtime, RuntimeFilter, SealedSecret, Secret, Template, TenantLimits } from '../core/types.js';
import { MIGRATIONS } from './migrations.js';
import {
  CHECKPOINT_COLUMNS,
  LIMIT_COLUMNS,
  LIMIT_NAMES,
  NODE_REGISTRATION_COLUMNS,
  RUNTIME_COLUMNS,
  SEALED_SECRET_COLUMNS,
  TEMPLATE_COLUMNS,
  TOKEN_COLUMNS,
  auditFromRow,
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
  runtimeFromRow,
  runtimeToRow,
  sealedSecretFromRow,
  sealedSecretToRow,
  templateFromRow,
  templateToRow,
  tokenFromRow,
  tokenToRow,
  type Row,
  strOrNull,
} from './rows.js';

type Db = Database;

export function openDatabase(file: string): Db {
  const db = new Database(file);
  chmodSync(file, 0o600);
  db.pragma('journal_mode = WAL');
  // FULL: a commit returns once the WAL is on disk, so an acknowledged create, update or delete
  // survives a power cut (NORMAL syncs only at checkpoints and can lose the last commits).
  // bench/api measures what it costs: one fdatasync per write transaction.
  db.pragma('synchronous = FULL');
  // The CLI and the service share the file; wait for the other writer instead of failing.
  db.pragma('busy_timeout = 5000');
  db.pragma('foreign_keys = ON');
  // Reads through mmap skip a pread per page: lookups are the hot path of every request.
  db.pragma('mmap_size = 268435456');
  migrate(db);
  return db;
}

function migrate(db: Db): void {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)');
  const current = (db.prepare('SELECT max(version) AS v FROM schema_migrations').get() as { v: number | null }).v ?? 0;
  for (const m of MIGRATIONS) {
    if (m.version <= current) continue;
    db.transaction(() => {
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)').run(m.version, new Date().toISOString());
    })();
  }
}


function isUniqueViolation(err: unknown): boolean {
  return typeof err === 'object' && err !== null && 'code' in err && String((err as { code: unknown }).code).startsWith('SQLITE_CONSTRAINT_UNIQUE');
}


const ROW_CACHE_ENTRIES = 10_000;
const cacheKey = (tenantId: string, ref: string): string => `${tenantId}\0${ref}`;

/** Tenant-owned records named by display_name: insert, find by id-then-name, keyset pages newest first. */
class TenantTable<T extends { id: string; tenantId: string; displayName: string }> implements TenantRepo<T> {
  readonly #insert: Statement;
  readonly #update: Statement;
  readonly #findId: Statement;
  readonly #findName: Statement;
  readonly #findById: Statement;
  readonly #list: Statement;
  readonly #all: Statement;
  readonly #delete: Statement;

  /**
   * For tables whose rows are never updated (secrets): records found are kept, frozen, by id and
   * by name, and dropped when deleted. Only this process writes these tables (the CLI writes
   * tokens alone, and the data-directory lock admits one service), so the cache cannot go stale;
   * it spares the hot GET of every request a read transaction, whose WAL locks cost more than the
   * lookup. Misses are not cached, so an insert needs no invalidation.
   */
  readonly #cache: Map<string, T> | null;

  constructor(
    db: Db,
    private readonly kind: string,
    table: string,
    columns: string[],
    private readonly toRow: (r: T) => Row,
    readonly fromRow: (r: Row) => T,
    options: { immutableRows?: boolean } = {},
  ) {
    this.#cache = options.immutableRows === true ? new Map() : null;
    this.#insert = db.prepare(`INSERT INTO ${table} (${columns.join(', ')}) VALUES (${columns.map((c) => '@' + c).join(', ')})`);
    this.#update = db.prepare(`UPDATE ${table} SET ${columns.filter((c) => c !== 'id').map((c) => `${c} = @${c}`).join(', ')} WHERE id = @id`);
    this.#findId = db.prepare(`SELECT * FROM ${table} WHERE id = ? AND tenant_id = ?`);
    this.#findName = db.prepare(`SELECT * FROM ${table} WHERE tenant_id = ? AND display_name = ?`);
    this.#findById = db.prepare(`SELECT * FROM ${table} WHERE id = ?`);
    this.#list = db.prepare(`SELECT * FROM ${table} WHERE tenant_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?`);
    this.#all = db.prepare(`SELECT * FROM ${table} ORDER BY seq`);
    this.#delete = db.prepare(`DELETE FROM ${table} WHERE tenant_id = ? AND id = ?`);
  }

  async insert(record: T): Promise<void> {
    try {
      this.#insert.run(this.toRow(record));
    } catch (err) {
      if (isUniqueViolation(err)) throw alreadyExists(this.kind, record.displayName);
      throw err;
    }
  }

  /** Names are never UUID-shaped, so the shape of `ref` says which index to use. */
  async find(tenantId: string, ref: string): Promise<T | undefined> {
    const byId = isUuid(ref);
    const key = cacheKey(tenantId, byId ? ref.toLowerCase() : ref);
    const cached = this.#cache?.get(key);
    if (cached !== undefined) return cached;
    const row = (byId ? this.#findId.get(ref.toLowerCase(), tenantId) : this.#findName.get(tenantId, ref)) as Row | undefined;
    if (row === undefined) return undefined;
    const record = this.fromRow(row);
    if (this.#cache !== null) {
      if (this.#cache.size >= ROW_CACHE_ENTRIES) this.#cache.clear();
      Object.freeze(record);
      this.#cache.set(cacheKey(tenantId, record.id), record).set(cacheKey(tenantId, record.displayName), record);
    }
    return record;
  }

  async findById(id: string): Promise<T | undefined> {
    const row = this.#findById.get(id) as Row | undefined;
    return row === undefined ? undefined : this.fromRow(row);
  }

  async list(tenantId: string, p: PageRequest): Promise<Page<T>> {
    return page(this.#list.all(tenantId, decodePageToken(p.pageToken), p.limit + 1) as Row[], p.limit, this.fromRow);
  }

  async listAll(): Promise<T[]> {
    return (this.#all.all() as Row[]).map(this.fromRow);
  }

  async update(record: T): Promise<void> {
    if (this.#cache !== null) throw new Error(`${this.kind} rows are immutable`);
    try {
      this.#update.run(this.toRow(record));
    } catch (err) {
      if (isUniqueViolation(err)) throw alreadyExists(this.kind, record.displayName);
      throw err;
    }
  }

  async delete(tenantId: string, id: string): Promise<boolean> {
    const cached = this.#cache?.get(cacheKey(tenantId, id));
    if (cached !== undefined) {
      this.#cache!.delete(cacheKey(tenantId, cached.id));
      this.#cache!.delete(cacheKey(tenantId, cached.displayName));
    }
    return this.#delete.run(tenantId, id).changes > 0;
  }
}

/**
 * Runtimes add lists by label and status, filtered in the query so that a page holds `limit`
 * matches; one statement serves every filter, which arrives as JSON: the statuses (an empty list
 * keeps all) and the label selectors as [key, value-or-null] pairs, each of which must find a
 * label of the runtime with that key (and value).
 */
class RuntimeTable extends TenantTable<Runtime> {
  readonly #matching: Statement;
  readonly #timed: Statement;
  readonly #handOver: Statement;

  constructor(db: Db) {
    super(db, 'runtime', 'runtimes', RUNTIME_COLUMNS, runtimeToRow, runtimeFromRow);
    this.#handOver = db.prepare(
      `UPDATE runtimes SET node = @to, status_message = @message, updated_at = @stamp
       WHERE id = @id AND node = @from AND updated_at = @seen AND status != 'deleting'`,
    );
    this.#matching = db.prepare(
      `SELECT * FROM runtimes r WHERE tenant_id = @tenant AND seq < @after
         AND (json_array_length(@statuses) = 0 OR status IN (SELECT value FROM json_each(@statuses)))
         AND NOT EXISTS (
           SELECT 1 FROM json_each(@selectors) s WHERE NOT EXISTS (
             SELECT 1 FROM json_each(r.labels) l
             WHERE l.key = json_extract(s.value, '$[0]') AND (json_extract(s.value, '$[1]') IS NULL OR l.value = json_extract(s.value, '$[1]'))))
       ORDER BY seq DESC LIMIT @limit`,
    );
    this.#timed = db.prepare(
      `SELECT * FROM runtimes WHERE node IS ? AND (status = 'running' OR (auto_delete_secs IS NOT NULL AND stopped_at IS NOT NULL AND status IN (SELECT value FROM json_each(?)))) ORDER BY seq`,
    );
  }

  async listMatching(tenantId: string, filter: RuntimeFilter, p: PageRequest): Promise<Page<Runtime>> {
    const rows = this.#matching.all({
      tenant: tenantId,
      after: decodePageToken(p.pageToken),
      statuses: JSON.stringify(filter.statuses),
      selectors: JSON.stringify(filter.labels),
      limit: p.limit + 1,
    }) as Row[];
    return page(rows, p.limit, this.fromRow);
  }

  async listTimed(node: string | null): Promise<Runtime[]> {
    return (this.#timed.all(node, JSON.stringify(STOPPED_STATUSES)) as Row[]).map(this.fromRow);
  }

  async handOver(id: string, expected: { node: string; updatedAt: string }, next: { node: string; statusMessage: string | null; updatedAt: string }): Promise<boolean> {
    const params = { id, from: expected.node, seen: expected.updatedAt, to: next.node, message: next.statusMessage, stamp: next.updatedAt };
    return this.#handOver.run(params).changes > 0;
  }
}

const withoutValue = ({ sealedValue: _, ...secret }: SealedSecret): Secret => secret;

/**
 * Secrets, read whole: SQLite serves a single host (and its CLI), which holds the master key.
 * What leaves here carries no sealed value but through findSealed, as on PostgreSQL, where a VM
 * host's role may not read it.
 */
class SecretTable implements SecretRepo {
  readonly #rows: TenantTable<SealedSecret>;

  constructor(db: Db) {
    this.#rows = new TenantTable(db, 'secret', 'secrets', SEALED_SECRET_COLUMNS, sealedSecretToRow, sealedSecretFromRow, { immutableRows: true });
  }

  insert = (secret: SealedSecret): Promise<void> => this.#rows.insert(secret);

  async find(tenantId: string, ref: string): Promise<Secret | undefined> {
    const found = await this.#rows.find(tenantId, ref);
    return found === undefined ? undefined : withoutValue(found);
  }

  async list(tenantId: string, p: PageRequest): Promise<Page<Secret>> {
    const listed = await this.#rows.list(tenantId, p);
    return { ...listed, items: listed.items.map(withoutValue) };
  }

  delete = (tenantId: string, id: string): Promise<boolean> => this.#rows.delete(tenantId, id);

  findSealed = async (tenantId: string, id: string): Promise<SealedSecret | undefined> => (isUuid(id) ? this.#rows.find(tenantId, id) : undefined);
}

export class SqliteStore implements Store {
  readonly #db: Db;
  readonly tokens: TokenRepo;
  readonly runtimes: RuntimeTable;
  readonly secrets: SecretTable;
  readonly templates: TenantTable<Template>;
  readonly rules: RuleRepo;
  readonly checkpoints: CheckpointRepo;
  readonly audits: AuditRepo;
  readonly quotas: QuotaRepo;
  readonly nodes: NodeRepo;

  constructor(file: string) {
    const db = (this.#db = openDatabase(file));
    this.runtimes = new RuntimeTable(db);
    this.secrets = new SecretTable(db);
    this.templates = new TenantTable(db, 'template', 'templates', TEMPLATE_COLUMNS, templateToRow, templateFromRow);
    this.tokens = tokenRepo(db);
    this.rules = ruleRepo(db);
    this.checkpoints = checkpointRepo(db);
    this.audits = auditRepo(db);
    this.quotas = quotaRepo(db);
    this.nodes = nodeRepo(db);
  }

  async close(): Promise<void> {
    if (this.#db.open) this.#db.close();
  }
}

function tokenRepo(db: Db): TokenRepo {
  const cols = `(${TOKEN_COLUMNS.join(', ')}) VALUES (${TOKEN_COLUMNS.map((c) => '@' + c).join(', ')})`;
  const insert = db.prepare(`INSERT INTO tokens ${cols}`);
  const put = db.prepare(`INSERT OR REPLACE INTO tokens ${cols}`);
  const byHash = db.prepare('SELECT * FROM tokens WHERE hash = ?');
  const all = db.prepare('SELECT * FROM tokens ORDER BY created_at DESC');
  const revoke = db.prepare('UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL');
  const byId = db.prepare('SELECT * FROM tokens WHERE id = ?');
  // The table has no seq column: its rowid orders it the same way (a newer insert has a larger
  // one; the bootstrap admin token, replaced at each start, moves to the front).
  const pageAll = db.prepare('SELECT rowid AS seq, * FROM tokens WHERE rowid < ? ORDER BY rowid DESC LIMIT ?');
  const pageTenant = db.prepare('SELECT rowid AS seq, * FROM tokens WHERE tenant_id = ? AND rowid < ? ORDER BY rowid DESC LIMIT ?');
  return {
    insert: async (t) => void insert.run(tokenToRow(t)),
    put: async (t) => void put.run(tokenToRow(t)),
    findByHash: async (hash) => {
      const row = byHash.get(hash) as Row | undefined;
      return row === undefined ? undefined : tokenFromRow(row);
    },
    findById: async (id) => {
      const row = byId.get(id) as Row | undefined;
      return row === undefined ? undefined : tokenFromRow(row);
    },
    list: async () => (all.all() as Row[]).map(tokenFromRow),
    page: async (f: TokenFilter) => {
      const before = decodePageToken(f.pageToken);
      const rows = (f.tenantId === undefined ? pageAll.all(before, f.limit + 1) : pageTenant.all(f.tenantId, before, f.limit + 1)) as Row[];
      return page(rows, f.limit, tokenFromRow);
    },
    revoke: async (id, at) => revoke.run(at, id).changes > 0,
  };
}

function ruleRepo(db: Db): RuleRepo {
  const insert = db.prepare(
    'INSERT INTO injection_rules (id, tenant_id, runtime_id, secret_id, host_pattern, path_pattern, injection, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
  );
  const find = db.prepare('SELECT * FROM injection_rules WHERE tenant_id = ? AND id = ?');
  const list = db.prepare('SELECT * FROM injection_rules WHERE tenant_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?');
  const listRt = db.prepare('SELECT * FROM injection_rules WHERE tenant_id = ? AND runtime_id = ? AND seq < ? ORDER BY seq DESC LIMIT ?');
  const forRuntime = db.prepare('SELECT * FROM injection_rules WHERE runtime_id = ? ORDER BY seq');
  const countSecret = db.prepare('SELECT count(*) AS n FROM injection_rules WHERE secret_id = ?');
  // The runtime must be the rule's tenant's: a row that says otherwise was not made by the API.
  const secretOnNode = db.prepare('SELECT 1 FROM injection_rules r JOIN runtimes rt ON rt.id = r.runtime_id AND rt.tenant_id = r.tenant_id WHERE r.tenant_id = ? AND r.secret_id = ? AND rt.node = ? LIMIT 1');
  const del = db.prepare('DELETE FROM injection_rules WHERE tenant_id = ? AND id = ?');
  const delRt = db.prepare('DELETE FROM injection_rules WHERE runtime_id = ?');
  return {
    insert: async (r) =>
      void insert.run(r.id, r.tenantId, r.runtimeId, r.secretId, r.hostPattern, r.pathPattern, JSON.stringify(r.injection), r.createdAt),
    find: async (tenantId, id) => {
      const row = find.get(tenantId, id.toLowerCase()) as Row | undefined;
      return row === undefined ? undefined : ruleFromRow(row);
    },
    list: async (tenantId, p, runtimeId) => {
      const after = decodePageToken(p.pageToken);
      const rows = (runtimeId === undefined ? list.all(tenantId, after, p.limit + 1) : listRt.all(tenantId, runtimeId, after, p.limit + 1)) as Row[];
      return page(rows, p.limit, ruleFromRow);
    },
    listForRuntime: async (runtimeId) => (forRuntime.all(runtimeId) as Row[]).map(ruleFromRow),
    countForSecret: async (secretId) => (countSecret.get(secretId) as { n: number }).n,
    namesSecretOnNode: async (tenantId, secretId, node) => secretOnNode.get(tenantId, secretId, node) !== undefined,
    delete: async (tenantId, id) => del.run(tenantId, id).changes > 0,
    deleteForRuntime: async (runtimeId) => delRt.run(runtimeId).changes,
  };
}

function checkpointRepo(db: Db): CheckpointRepo {
  const cols = CHECKPOINT_COLUMNS;
  const insert = db.prepare(`INSERT INTO checkpoints (${cols.join(', ')}) VALUES (${cols.map((c) => '@' + c).join(', ')})`);
  const update = db.prepare(`UPDATE checkpoints SET ${cols.filter((c) => c !== 'id').map((c) => `${c} = @${c}`).join(', ')} WHERE id = @id`);
  const visible = '(tenant_id = @tenant OR (@system = 1 AND tenant_id IS NULL)) AND deleted = 0';
  const find = db.prepare(`SELECT * FROM checkpoints WHERE ${visible} AND (id = @id OR display_name = @name) ORDER BY id = @id DESC, tenant_id IS NULL LIMIT 1`);
  const list = db.prepare(`SELECT * FROM checkpoints WHERE ${visible} AND seq < @after ORDER BY seq DESC LIMIT @limit`);
  const all = db.prepare('SELECT * FROM checkpoints ORDER BY seq');
  const purge = db.prepare('DELETE FROM checkpoints WHERE id = ?');
  const move = db.prepare('UPDATE checkpoints SET node = @to WHERE id = @id AND node = @from AND deleted = 0');
  const archived = db.prepare('UPDATE checkpoints SET archive_digest = ? WHERE id = ? AND deleted = 0');
  const archiveDigest = db.prepare('SELECT archive_digest FROM checkpoints WHERE id = ?');
  const unarchived = db.prepare(`SELECT id FROM checkpoints WHERE node IS ? AND state = 'ready' AND deleted = 0 AND tenant_id IS NOT NULL AND archive_digest IS NULL ORDER BY seq`);
  const guard = (fn: () => void, name: string) => {
    try {
      fn();
    } catch (err) {
      if (isUniqueViolation(err)) throw alreadyExists('checkpoint', name);
      throw err;
    }
  };
  return {
    insert: async (c) => guard(() => insert.run(checkpointToRow(c)), c.displayName),
    update: async (c) => guard(() => update.run(checkpointToRow(c)), c.displayName),
    find: async (tenantId, ref, includeSystem = false) => {
      const row = find.get({ tenant: tenantId, system: includeSystem ? 1 : 0, id: ref.toLowerCase(), name: ref }) as Row | undefined;
      return row === undefined ? undefined : checkpointFromRow(row);
    },
    list: async (tenantId, p, includeSystem) =>
      page(
        list.all({ tenant: tenantId, system: includeSystem ? 1 : 0, after: decodePageToken(p.pageToken), limit: p.limit + 1 }) as Row[],
        p.limit,
        checkpointFromRow,
      ),
    listAll: async () => (all.all() as Row[]).map(checkpointFromRow),
    moveNode: async (id, from, to) => move.run({ id, from, to }).changes > 0,
    purge: async (id) => void purge.run(id),
    setArchived: async (id, digest) => archived.run(digest, id).changes > 0,
    archiveDigest: async (id) => strOrNull((archiveDigest.get(id) as Row | undefined)?.archive_digest ?? null),
    listUnarchived: async (node) => (unarchived.all(node) as Row[]).map((r) => String(r.id)),
  };
}

function auditRepo(db: Db): AuditRepo {
  // An audit sent again (its sender did not hear that it was stored) is stored once.
  const insert = db.prepare('INSERT INTO audits (id, tenant_id, runtime_id, category, payload, created_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING');
  const insertMany = db.transaction((audits: Audit[]) => {
    for (const a of audits) insert.run(a.id, a.tenantId, a.runtimeId, a.category, JSON.stringify(a.payload), a.createdAt);
  });
  const list = db.prepare(
    `SELECT * FROM audits WHERE tenant_id = @tenant AND (@category IS NULL OR category = @category)
       AND (@runtime IS NULL OR runtime_id = @runtime) AND seq < @after ORDER BY seq DESC LIMIT @limit`,
  );
  /*
   * Per tenant, in index order only: `cutoff` is the newest audit past the tenant's retention
   * (an OFFSET walk of audits_tenant; none, and nothing is deleted, while the tenant is within
   * it). Each runtime of the tenant that has audits that old keeps its newest `perRuntime`: its
   * floor is found by an OFFSET walk of audits_runtime (-1: it has fewer). The delete then reads
   * only the tenant's audits up to the cutoff. A runtime deleted since has no floor: its audits
   * go with the tenant's oldest. (Ranking the tenant's audits with row_number() windows instead
   * sorts all of them at every prune: 1.8 s against 0.5 s for 150,000 here.)
   */
  const prune = db.prepare(
    `WITH cutoff AS (SELECT seq FROM audits WHERE tenant_id = @tenant ORDER BY seq DESC LIMIT 1 OFFSET @perTenant),
       floors AS MATERIALIZED (
         SELECT r.id AS runtime_id,
           coalesce((SELECT seq FROM audits WHERE runtime_id = r.id ORDER BY seq DESC LIMIT 1 OFFSET @perRuntime - 1), -1) AS seq
         FROM runtimes r
         WHERE r.tenant_id = @tenant AND EXISTS (SELECT 1 FROM audits WHERE runtime_id = r.id AND seq <= (SELECT seq FROM cutoff)))
     DELETE FROM audits
     WHERE tenant_id = @tenant AND seq <= (SELECT seq FROM cutoff)
       AND seq < coalesce((SELECT seq FROM floors WHERE floors.runtime_id = audits.runtime_id), ${Number.MAX_SAFE_INTEGER})`,
  );
  const pruneTenants = db.transaction((tenantIds: string[], retention: AuditRetention) =>
    tenantIds.reduce((deleted, tenant) => deleted + prune.run({ tenant, ...retention }).changes, 0),
  );
  return {
    insert: async (audits) => insertMany(audits),
    list: async (tenantId, f: AuditFilter) =>
      page(
        list.all({ tenant: tenantId, category: f.category ?? null, runtime: f.runtimeId ?? null, after: decodePageToken(f.pageToken), limit: f.limit + 1 }) as Row[],
        f.limit,
        auditFromRow,
      ),
    prune: async (tenantIds, retention) => pruneTenants(tenantIds, retention),
  };
}


/**
 * What a tenant's runtimes hold: how many, and the vCPUs and memory limits of those with a VM
 * (LIVE_STATUSES, bound as @live JSON). A host's holdings follow the same rule, kept by triggers
 * (migration 10).
 */
const TENANT_HOLDINGS = `SELECT count(*) AS runtimes,
     coalesce(sum(json_extract(resources, '$.vcpus')) FILTER (WHERE holds_vm), 0) AS vcpus,
     coalesce(sum(json_extract(resources, '$.limits.memory_mib')) FILTER (WHERE holds_vm), 0) AS memory_mib
   FROM (SELECT resources, status IN (SELECT value FROM json_each(@live)) AS holds_vm FROM runtimes WHERE tenant_id = @tenant)`;

function quotaRepo(db: Db): QuotaRepo {
  const runtimeUsage = db.prepare(TENANT_HOLDINGS);
  const checkpointUsage = db.prepare(
    `SELECT count(*) AS checkpoints, coalesce(sum(disk_bytes) FILTER (WHERE state = 'ready'), 0) AS bytes
     FROM checkpoints WHERE tenant_id = ? AND deleted = 0`,
  );
  const templateUsage = db.prepare(
    `SELECT count(*) AS templates, coalesce(sum(disk_bytes) FILTER (WHERE state = 'ready'), 0) AS bytes FROM templates WHERE tenant_id = ?`,
  );
  const live = JSON.stringify(LIVE_STATUSES);
  const find = db.prepare('SELECT * FROM tenant_limits WHERE tenant_id = ?');
  const put = db.prepare(
    `INSERT OR REPLACE INTO tenant_limits (tenant_id, ${LIMIT_NAMES.map((n) => LIMIT_COLUMNS[n]).join(', ')}, updated_at)
     VALUES (@tenant, ${LIMIT_NAMES.map((n) => '@' + n).join(', ')}, @at)`,
  );
  const remove = db.prepare('DELETE FROM tenant_limits WHERE tenant_id = ?');
  const overrides = (tenantId: string): Partial<TenantLimits> => {
    const row = find.get(tenantId) as Row | undefined;
    const set: Partial<TenantLimits> = {};
    for (const name of LIMIT_NAMES) {
      const value = numOrNull(row?.[LIMIT_COLUMNS[name]]);
      if (value !== null) set[name] = value;
    }
    return set;
  };
  const setOverrides = db.transaction((tenantId: string, changes: TenantLimitOverrides) => {
    const current = overrides(tenantId);
    const merged: Record<string, number | null> = {};
    for (const name of LIMIT_NAMES) merged[name] = changes[name] === undefined ? (current[name] ?? null) : changes[name];
    if (LIMIT_NAMES.every((name) => merged[name] === null)) remove.run(tenantId);
    else put.run({ ...merged, tenant: tenantId, at: new Date().toISOString() });
  });
  return {
    usage: async (tenantId) => {
      const r = runtimeUsage.get({ tenant: tenantId, live }) as { runtimes: number; vcpus: number; memory_mib: number };
      const c = checkpointUsage.get(tenantId) as { checkpoints: number; bytes: number };
      const t = templateUsage.get(tenantId) as { templates: number; bytes: number };
      return { runtimes: r.runtimes, vcpus: r.vcpus, memoryMib: r.memory_mib, checkpoints: c.checkpoints, checkpointBytes: c.bytes, templates: t.templates, templateBytes: t.bytes };
    },
    overrides: async (tenantId) => overrides(tenantId),
    setOverrides: async (tenantId, changes) => setOverrides(tenantId, changes),
  };
}

/**
 * Leases by the process clock, as ISO strings (which order as the times do): SQLite is one host,
 * and a fleet needs PostgreSQL anyway, which keeps them on the database's clock.
 */
function nodeRepo(db: Db): NodeRepo {
  const cols = NODE_REGISTRATION_COLUMNS;
  const renew = db.prepare(
    `INSERT INTO nodes (${cols.join(', ')}, lease_expires_at, registered_at) VALUES (${cols.map((c) => '@' + c).join(', ')}, @expires, @now)
     ON CONFLICT (name) DO UPDATE SET ${[...cols.slice(1), 'lease_expires_at'].map((c) => `${c} = excluded.${c}`).join(', ')}
     WHERE nodes.holder IS NULL OR nodes.holder = excluded.holder OR nodes.lease_expires_at <= @now
     RETURNING *`,
  );
  const list = db.prepare('SELECT * FROM nodes ORDER BY name');
  const find = db.prepare('SELECT * FROM nodes WHERE name = ?');
  const setDraining = db.prepare('UPDATE nodes SET draining = ? WHERE name = ?');
  // Kept by triggers on runtimes (migration 10): one row per host, whatever the fleet's size.
  const load = db.prepare('SELECT node, runtimes, vcpus, memory_mib FROM node_holdings WHERE runtimes > 0');
  const propose = db.prepare('INSERT INTO fleet_settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING');
  const setting = db.prepare('SELECT value FROM fleet_settings WHERE name = ?');
  const putSetting = db.prepare('INSERT INTO fleet_settings (name, value) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value');
  const toNode = (row: Row) => nodeFromRow(row, Date.parse(row.lease_expires_at as string) > Date.now());
  return {
    renew: async (reg, leaseSecs) => {
      checkLeaseSecs(leaseSecs);
      const now = Date.now();
      const row = renew.get({ ...nodeRegistrationToRow(reg), expires: new Date(now + leaseSecs * 1000).toISOString(), now: new Date(now).toISOString() }) as Row | undefined;
      if (row === undefined) throw nameHeld(reg.name, String((find.get(reg.name) as Row).lease_expires_at));
      return toNode(row);
    },
    list: async () => (list.all() as Row[]).map(toNode),
    find: async (name) => {
      const row = find.get(name) as Row | undefined;
      return row === undefined ? undefined : toNode(row);
    },
    setDraining: async (name, draining) => setDraining.run(draining ? 1 : 0, name).changes > 0,
    load: async () =>
      new Map(
        (load.all() as Array<{ node: string; runtimes: number; vcpus: number; memory_mib: number }>).map((r): [string, NodeLoad] => [
          r.node,
          { runtimes: r.runtimes, vcpus: r.vcpus, memoryMib: r.memory_mib },
        ]),
      ),
    shared: async (name, proposed) => {
      propose.run(name, proposed);
      return (setting.get(name) as { value: string }).value;
    },
    enroll: async (name, credential) => void putSetting.run(credentialKey(name), credential),
    credential: async (name) => (setting.get(credentialKey(name)) as { value: string } | undefined)?.value,
  };
}
