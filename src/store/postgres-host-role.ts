/**
 * The PostgreSQL role VM hosts connect as (docs/scaling.md, "The VM hosts' database role"): what
 * a host needs to run its runtimes, and no more. API nodes and the operator's CLI keep the owner's
 * role; a compromised host holding this one cannot write a token (so cannot mint one, admin or
 * not), read a secret's sealed value, change a secret, a tenant's limits or the fleet's settings
 * (its CAs and enrollments), nor change the schema.
 *
 * Every table has its line here: `HOST_PRIVILEGES` is checked against the schema by the tests, so
 * a table added by a migration without a decision about hosts fails them. `vessel node db-role
 * ROLE` applies the set and records the role; every later migration applies it again, so new
 * tables get their grants with the migration that makes them.
 */
import pg from 'pg';

type Privilege = 'SELECT' | 'INSERT' | 'UPDATE' | 'DELETE';

/** What a VM host may do to each table: privileges on the whole table, or SELECT of the columns named. */
export const HOST_PRIVILEGES: Readonly<Record<string, readonly Privilege[] | { select: readonly string[] }>> = {
  schema_migrations: ['SELECT'],
  // Read for /metrics, which takes an admin token on a host; never written.
  tokens: ['SELECT'],
  // Found by name or id for a rule; made and deleted by API nodes. Never the sealed value: an API
  // node opens a secret for a host, and only for a rule of a runtime on it (docs/scaling.md).
  secrets: { select: ['seq', 'id', 'tenant_id', 'display_name', 'cache_ttl_secs', 'created_at'] },
  tenant_limits: ['SELECT'],
  // Its CAs and the hosts' enrollments: written by API nodes and the operator alone.
  fleet_settings: ['SELECT'],
  runtimes: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'],
  injection_rules: ['SELECT', 'INSERT', 'DELETE'],
  checkpoints: ['SELECT', 'INSERT', 'UPDATE', 'DELETE'],
  // Templates are built and held on a single host for now (docs/templates.md): a VM host of a
  // fleet only reads them, to refuse what it cannot serve.
  templates: ['SELECT'],
  audits: ['SELECT', 'INSERT', 'DELETE'],
  // Kept by the runtimes trigger, which runs as the owner: a host only reads it.
  node_holdings: ['SELECT'],
  // Its lease; a host never removes a host.
  nodes: ['SELECT', 'INSERT', 'UPDATE'],
};

/** Where the role's name is recorded, for later migrations to grant again. */
export const HOST_ROLE_SETTING = 'host-db-role';

/**
 * The statements that give `role` exactly HOST_PRIVILEGES on the tables of the current schema;
 * with `existing`, only on those tables (a schema older than this code lacks the newer ones,
 * which the migration that makes them grants).
 */
export function hostRoleStatements(role: string, existing?: ReadonlySet<string>): string[] {
  const r = pg.escapeIdentifier(role);
  return [
    `REVOKE ALL ON ALL TABLES IN SCHEMA __SCHEMA__ FROM ${r}`,
    `GRANT USAGE ON SCHEMA __SCHEMA__ TO ${r}`,
    ...Object.entries(HOST_PRIVILEGES)
      .filter(([table]) => existing === undefined || existing.has(table))
      .map(([table, privileges]) => {
        const what = 'select' in privileges ? `SELECT (${privileges.select.map((c) => pg.escapeIdentifier(c)).join(', ')})` : privileges.join(', ');
        return `GRANT ${what} ON ${pg.escapeIdentifier(table)} TO ${r}`;
      }),
  ];
}

type Queryable = Pick<pg.PoolClient, 'query'>;

/** Applies the host role's privileges on `db`'s current schema (run as the tables' owner). */
export async function grantHostRole(db: Queryable, role: string): Promise<string[]> {
  const { rows } = await db.query<{ schema: string }>('SELECT current_schema() AS schema');
  const schema = pg.escapeIdentifier(rows[0]!.schema);
  const tables = await db.query<{ name: string }>('SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()');
  const statements = hostRoleStatements(role, new Set(tables.rows.map((t) => t.name))).map((s) => s.replaceAll('__SCHEMA__', schema));
  for (const statement of statements) await db.query(statement);
  return statements;
}

/**
 * `vessel node db-role ROLE`: creates the role if asked (LOGIN, with a password if one is given),
 * applies its privileges, and records it so that later migrations grant again. In one transaction:
 * a failure leaves the role's privileges as they were.
 */
export async function setUpHostRole(connectionString: string, role: string, create: { password?: string | undefined } | null): Promise<string[]> {
  const client = new pg.Client({ connectionString });
  await client.connect();
  try {
    await client.query('BEGIN');
    const applied: string[] = [];
    if (create !== null) {
      const exists = (await client.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [role])).rowCount! > 0;
      if (!exists) {
        const password = create.password === undefined ? '' : ` PASSWORD ${pg.escapeLiteral(create.password)}`;
        await client.query(`CREATE ROLE ${pg.escapeIdentifier(role)} LOGIN${password}`);
        applied.push(`CREATE ROLE ${pg.escapeIdentifier(role)} LOGIN${password === '' ? '' : ' PASSWORD …'}`);
      }
    }
    applied.push(...(await grantHostRole(client, role)));
    await client.query('INSERT INTO fleet_settings (name, value) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value', [HOST_ROLE_SETTING, role]);
    await client.query('COMMIT');
    return applied;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    await client.end();
  }
}
