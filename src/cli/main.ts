#!/usr/bin/env node
/** The `vessel` command: serve the API, manage tokens, build the guest image. */
import { join } from 'node:path';
import { Command } from 'commander';
import pino from 'pino';
import { checkDisplayName } from '../core/names.js';
import type { TenantLimitOverrides } from '../core/ports.js';
import { TenantQuotas } from '../core/quotas.js';
import { TokenService, parseScopes } from '../core/tokens.js';
import { SqliteStore } from '../store/sqlite-store.js';
import { buildImage } from '../vm/guest-image.js';
import { ensureHostPackages } from '../vm/host-packages.js';
import { loadConfig, type Config } from './config.js';
import { ensureDataDir } from './data-dir.js';
import { progressDisplay } from './progress.js';
import { imagesDir, serve } from './serve.js';

const program = new Command('vessel').description('Self-hosted microVM sandboxes behind one REST API');

program
  .command('serve')
  .description('install missing host packages, build the guest image if needed, and serve the API')
  .action(async () => serve(loadConfig()));

/** The CLI works on the data directory's store directly, also while the service runs (WAL). */
function withStore<T>(work: (store: SqliteStore, config: Config) => Promise<T>): Promise<T> {
  const config = loadConfig();
  ensureDataDir(config.dataDir);
  const store = new SqliteStore(join(config.dataDir, 'vessel.db'));
  return work(store, config).finally(() => store.close());
}

const withTokens = <T>(work: (tokens: TokenService) => Promise<T>): Promise<T> => withStore((store) => work(new TokenService(store)));

const token = program.command('token').description('manage API bearer tokens');
token
  .command('create')
  .requiredOption('--tenant <tenant>', 'tenant the token acts for')
  .requiredOption('--scopes <list>', 'comma-separated scopes, e.g. runtimes:read,exec (admin = all)')
  .option('--name <name>', 'a label for the token', 'token')
  .action(async (o: { tenant: string; scopes: string; name: string }) =>
    withTokens(async (tokens) => {
      const { token: value, record } = await tokens.create(o.tenant, parseScopes(o.scopes), o.name);
      process.stdout.write(`${JSON.stringify({ id: record.id, tenant: record.tenantId, scopes: record.scopes, token: value })}\n`);
    }),
  );
token.command('list').action(async () =>
  withTokens(async (tokens) => {
    for (const t of await tokens.list()) {
      process.stdout.write(`${JSON.stringify({ id: t.id, tenant: t.tenantId, name: t.name, scopes: t.scopes, created_at: t.createdAt, revoked_at: t.revokedAt })}\n`);
    }
  }),
);
token
  .command('revoke')
  .argument('<id>', 'token id')
  .action(async (id: string) =>
    withTokens(async (tokens) => {
      if (!(await tokens.revoke(id))) {
        process.stderr.write(`no active token with id ${id}\n`);
        process.exitCode = 1;
      }
    }),
  );

const snakeCase = (o: object): Record<string, unknown> =>
  Object.fromEntries(Object.entries(o).map(([k, v]) => [k.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), v]));

/** The limits in force, which of them are the tenant's own (the others are the VESSEL_TENANT_MAX_* defaults), and its usage. */
async function showLimits(store: SqliteStore, quotas: TenantQuotas, tenantId: string): Promise<void> {
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

type LimitFlags = { tenant: string; runtimes?: string; vcpus?: string; memoryMib?: string; checkpoints?: string; checkpointGib?: string };

const tenant = program.command('tenant').description("tenants' quotas");
const limits = tenant.command('limits').description("what a tenant may hold: its own limits where set, else the VESSEL_TENANT_MAX_* defaults");
limits
  .command('show')
  .requiredOption('--tenant <tenant>', 'the tenant')
  .action(async (o: { tenant: string }) =>
    withStore(async (store, config) => showLimits(store, new TenantQuotas(store, config.tenantLimits), checkDisplayName(o.tenant, 'tenant'))),
  );
limits
  .command('set')
  .description("sets the given limits (applies at once, also while the service runs); 'default' drops the tenant's own value")
  .requiredOption('--tenant <tenant>', 'the tenant')
  .option('--runtimes <n>', 'runtimes, in any state')
  .option('--vcpus <n>', 'vCPUs of the runtimes that hold a VM')
  .option('--memory-mib <n>', 'memory limits (MiB) of the runtimes that hold a VM')
  .option('--checkpoints <n>', 'checkpoints')
  .option('--checkpoint-gib <n>', 'disk space (GiB) of the ready checkpoints')
  .action(async (o: LimitFlags) =>
    withStore(async (store, config) => {
      const tenantId = checkDisplayName(o.tenant, 'tenant');
      const changes: TenantLimitOverrides = {
        runtimes: limitFlag('runtimes', o.runtimes),
        vcpus: limitFlag('vcpus', o.vcpus),
        memoryMib: limitFlag('memory-mib', o.memoryMib),
        checkpoints: limitFlag('checkpoints', o.checkpoints),
        checkpointGib: limitFlag('checkpoint-gib', o.checkpointGib),
      };
      if (Object.values(changes).every((v) => v === undefined)) throw new Error('give at least one limit to set');
      const quotas = new TenantQuotas(store, config.tenantLimits);
      await quotas.setLimits(tenantId, changes);
      await showLimits(store, quotas, tenantId);
    }),
  );

const image = program.command('image').description('the guest image');
image
  .command('build')
  .description('rebuild the guest image from the recipe in guest/')
  .option('--if-missing', 'build only when no image matches the recipe', false)
  .action(async (o: { ifMissing: boolean }) => {
    const config = loadConfig();
    ensureDataDir(config.dataDir);
    await ensureHostPackages((line) => pino().info(line));
    const img = await buildImage({ imagesDir: imagesDir(config), progress: progressDisplay(), force: !o.ifMissing });
    process.stdout.write(`${img.dir}\n`);
  });

program.parseAsync().catch((err: unknown) => {
  process.stderr.write(`vessel: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
