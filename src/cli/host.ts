/**
 * The host commands' work (serve, tokens, tenant limits, the guest image): they run on the
 * service's host, over its data directory. commands/host.ts loads this module only when one of
 * them runs. It loads the store alone; `serve` and the image build load the rest of the service
 * (serve.js: API, VM driver, network) when they run, which would add more than a second to the
 * start of every token, tenant or node command (a script calls those one after another).
 */
import { resolve } from 'node:path';
import { checkDisplayName } from '../core/names.js';
import type { Store, TenantLimitOverrides } from '../core/ports.js';
import { TenantQuotas } from '../core/quotas.js';
import { TokenService, parseScopes } from '../core/tokens.js';
import type { Token } from '../core/types.js';
import { openStore } from '../store/open-store.js';
import { checkNodeName, loadConfig, type Config } from './config.js';
import { ensureDataDir, loadMasterKey } from './data-dir.js';
import { SecretBox } from '../core/secret-box.js';
import { CliError } from './shared/exit-codes.js';
import type { Role } from './serve.js';

export async function serveFromEnv(role: Role): Promise<void> {
  const { serve } = await import('./serve.js');
  await serve(loadConfig(), role);
}

export const listNodes = (): Promise<void> =>
  withStore(async (store) => {
    const [nodes, load] = await Promise.all([store.nodes.list(), store.nodes.load()]);
    for (const n of nodes) {
      const used = load.get(n.name) ?? { memoryMib: 0, vcpus: 0, runtimes: 0 };
      const line = { name: n.name, alive: n.alive, draining: n.draining, lease_expires_at: n.leaseExpiresAt, internal_url: n.internalUrl, ingress_address: n.ingressAddress, capacity: snakeCase(n.capacity), load: snakeCase(used) };
      process.stdout.write(`${JSON.stringify(line)}\n`);
    }
  });

export const drainNode = (name: string, draining: boolean): Promise<void> =>
  withStore(async (store) => {
    if (!(await store.nodes.setDraining(name, draining))) throw new CliError(`no VM host is registered as '${name}'`);
    process.stdout.write(`${JSON.stringify({ name, draining })}\n`);
  });

/**
 * The fleet secret and the master key, for commands that act as an API node does: given in the
 * environment, never made up here (a key made up would seal the fleet's CAs under the wrong one).
 */
function fleetKeys(config: Config, why: string): { secret: string; box: SecretBox } {
  const secret = config.fleet.internalSecret;
  if (secret === undefined || config.masterKey === undefined) throw new CliError(`VESSEL_INTERNAL_SECRET and VESSEL_MASTER_KEY must be set, as on the API nodes: ${why}`);
  return { secret, box: new SecretBox(loadMasterKey(config.dataDir, config.masterKey)) };
}

/** Drains the host, then moves what runs and what is kept there to other hosts (src/cluster/evacuation.ts). */
export const evacuateNode = (name: string): Promise<void> =>
  withStore(async (store, config) => {
    const { secret, box } = fleetKeys(config, 'moves are calls to VM hosts, signed with their keys, over TLS with the fleet CA');
    const { evacuate } = await import('../cluster/evacuation.js');
    const { apiHopClient } = await import('../cluster/enrollment.js');
    const client = await apiHopClient(store.nodes, secret, box);
    try {
      const stayed = await evacuate(store, client, name, (line) => process.stdout.write(`${JSON.stringify(line)}\n`));
      if (stayed > 0) throw new CliError(`${stayed} runtime(s) or checkpoint(s) stayed on '${name}': see the lines with "moved":false`);
    } finally {
      client.close();
    }
  });

/**
 * Gives the VM hosts' PostgreSQL role its privileges, and no more (src/store/postgres-host-role.ts);
 * with `create`, makes it first if it is missing (LOGIN; the password VESSEL_HOST_DB_PASSWORD
 * names, if set). Runs as the tables' owner, the role VESSEL_DATABASE_URL names.
 */
export const setUpHostDbRole = (role: string, o: { create: boolean }): Promise<void> =>
  withStore(async (_store, config) => {
    if (config.databaseUrl === undefined) throw new CliError('VESSEL_DATABASE_URL must name the fleet\'s PostgreSQL, as its tables\' owner');
    if (!/^[a-z_][a-z0-9_]{0,62}$/.test(role)) throw new CliError(`a role name is lower-case letters, digits and '_', got '${role.slice(0, 80)}'`);
    const { setUpHostRole } = await import('../store/postgres-host-role.js');
    const applied = await setUpHostRole(config.databaseUrl, role, o.create ? { password: process.env.VESSEL_HOST_DB_PASSWORD || undefined } : null);
    for (const statement of applied) process.stdout.write(`${statement};\n`);
  });

/**
 * Enrolls a VM host (src/cluster/enrollment.ts): its certificate and its copy of the egress CA go
 * to the store, and its key is printed, to be given to that host alone as VESSEL_NODE_KEY.
 */
export const enrollNode = (name: string): Promise<void> =>
  withStore(async (store, config) => {
    const { secret, box } = fleetKeys(config, "a host's key is derived from the fleet secret, and the fleet's CAs are sealed with the master key");
    const { enrollHost } = await import('../cluster/enrollment.js');
    const { nodeKey, notAfter } = await enrollHost(store.nodes, secret, box, checkNodeName(name));
    process.stdout.write(`${JSON.stringify({ name, node_key: nodeKey, certificate_expires: notAfter })}\n`);
  });

/**
 * The CLI works on the service's store directly, also while the service runs: the data
 * directory's SQLite file (WAL), or the PostgreSQL that VESSEL_DATABASE_URL names.
 */
async function withStore<T>(work: (store: Store, config: Config) => Promise<T>, dataDir?: string): Promise<T> {
  const loaded = loadConfig();
  const config = dataDir === undefined ? loaded : { ...loaded, dataDir: resolve(dataDir) };
  ensureDataDir(config.dataDir);
  const store = await openStore(config);
  return work(store, config).finally(() => store.close());
}

const withTokens = <T>(dataDir: string, work: (tokens: TokenService) => Promise<T>): Promise<T> => withStore((store) => work(new TokenService(store)), dataDir);

/** The host commands print a token's record as one JSON line, in the API's field names. */
const printRecord = (t: Token, extra: object = {}): void => {
  const { id, tenantId, name, scopes, createdAt, revokedAt } = t;
  process.stdout.write(`${JSON.stringify({ id, tenant: tenantId, name, scopes, created_at: createdAt, revoked_at: revokedAt, ...extra })}\n`);
};

export const createToken = (dataDir: string, o: { tenant: string; scopes: string; name: string }): Promise<void> =>
  withTokens(dataDir, async (tokens) => {
    const { token: value, record } = await tokens.create(o.tenant, parseScopes(o.scopes), o.name);
    printRecord(record, { token: value });
  });

export const listTokens = (dataDir: string, o: { tenant?: string | undefined; limit?: number | undefined }): Promise<void> =>
  withTokens(dataDir, async (tokens) => {
    const all = (await tokens.list()).filter((t) => o.tenant === undefined || t.tenantId === o.tenant);
    for (const t of all.slice(0, o.limit)) printRecord(t);
  });

export const showToken = (dataDir: string, id: string): Promise<void> => withTokens(dataDir, async (tokens) => printRecord(await tokens.get(id)));

export const revokeToken = (dataDir: string, id: string): Promise<void> =>
  withTokens(dataDir, async (tokens) => {
    if (!(await tokens.revoke(id))) throw new CliError(`no active token with id ${id}`);
  });

const snakeCase = (o: object): Record<string, unknown> =>
  Object.fromEntries(Object.entries(o).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]));

/** The limits in force, which of them are the tenant's own (the others are the VESSEL_TENANT_MAX_* defaults), and its usage. */
async function showLimits(store: Store, quotas: TenantQuotas, tenantId: string): Promise<void> {
  const own = Object.keys(snakeCase(await store.quotas.overrides(tenantId)));
  const [limits, usage] = [await quotas.limits(tenantId), await quotas.usage(tenantId)];
  process.stdout.write(`${JSON.stringify({ tenant: tenantId, limits: snakeCase(limits), own, usage: snakeCase(usage) })}\n`);
}

/** A limit flag: a whole number, or `default` to drop the tenant's own value. */
function limitFlag(flag: string, raw: string | undefined): number | null | undefined {
  if (raw === undefined) return undefined;
  if (raw === 'default') return null;
  if (!/^\d{1,15}$/.test(raw)) throw new Error(`--${flag} must be a whole number or 'default', got '${raw}'`);
  return Number(raw);
}

export type LimitFlags = { tenant: string; runtimes?: string; vcpus?: string; memoryMib?: string; checkpoints?: string; checkpointGib?: string; templates?: string; templateGib?: string };

export const showTenantLimits = (tenant: string): Promise<void> =>
  withStore(async (store, config) => showLimits(store, new TenantQuotas(store, config.tenantLimits), checkDisplayName(tenant, 'tenant')));

export const setTenantLimits = (o: LimitFlags): Promise<void> =>
  withStore(async (store, config) => {
    const tenantId = checkDisplayName(o.tenant, 'tenant');
    const changes: TenantLimitOverrides = {
      runtimes: limitFlag('runtimes', o.runtimes),
      vcpus: limitFlag('vcpus', o.vcpus),
      memoryMib: limitFlag('memory-mib', o.memoryMib),
      checkpoints: limitFlag('checkpoints', o.checkpoints),
      checkpointGib: limitFlag('checkpoint-gib', o.checkpointGib),
      templates: limitFlag('templates', o.templates),
      templateGib: limitFlag('template-gib', o.templateGib),
    };
    if (Object.values(changes).every((v) => v === undefined)) throw new Error('give at least one limit to set');
    const quotas = new TenantQuotas(store, config.tenantLimits);
    await quotas.setLimits(tenantId, changes);
    await showLimits(store, quotas, tenantId);
  });

export async function buildGuestImage(o: { ifMissing: boolean }): Promise<void> {
  const [{ default: pino }, { buildImage }, { ensureHostPackages }, { progressDisplay }, { imagesDir }] = await Promise.all([
    import('pino'),
    import('../vm/guest-image.js'),
    import('../vm/host-packages.js'),
    import('./progress.js'),
    import('./serve.js'),
  ]);
  const config = loadConfig();
  ensureDataDir(config.dataDir);
  await ensureHostPackages((line) => pino().info(line));
  const img = await buildImage({ imagesDir: imagesDir(config), progress: progressDisplay(), force: !o.ifMissing });
  process.stdout.write(`${img.dir}\n`);
}
