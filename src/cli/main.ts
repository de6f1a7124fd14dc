#!/usr/bin/env node
/** The `vessel` command: serve the API, manage tokens, build the guest image. */
import { join } from 'node:path';
import { Command } from 'commander';
import pino from 'pino';
import { TokenService, parseScopes } from '../core/tokens.js';
import { SqliteStore } from '../store/sqlite-store.js';
import { buildImage } from '../vm/guest-image.js';
import { ensureHostPackages } from '../vm/host-packages.js';
import { loadConfig } from './config.js';
import { ensureDataDir } from './data-dir.js';
import { progressDisplay } from './progress.js';
import { imagesDir, serve } from './serve.js';

const program = new Command('vessel').description('Self-hosted microVM sandboxes behind one REST API');

program
  .command('serve')
  .description('install missing host packages, build the guest image if needed, and serve the API')
  .action(async () => serve(loadConfig()));

function withTokens<T>(work: (tokens: TokenService) => Promise<T>): Promise<T> {
  const config = loadConfig();
  ensureDataDir(config.dataDir);
  const store = new SqliteStore(join(config.dataDir, 'vessel.db'));
  return work(new TokenService(store)).finally(() => store.close());
}

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
