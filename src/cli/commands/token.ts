/**
 * `vessel token create|ls|get|revoke`: through the API with an admin token (a remote operator's
 * way), or on the service's data directory directly (the host's, and the only way before any
 * token exists). tokenTarget() says which, by a fixed order that docs/cli.md states.
 */
import { existsSync } from 'node:fs';
import type { Command } from 'commander';
import type { Token, TokenCreated } from 'vessel/client';
import { clientAction, pageSize, take, withJson, type Context } from '../shared/client.js';
import { age, printFields, printJson, printTable } from '../shared/output.js';
import { positiveNumber } from '../shared/parse.js';
import { configPath } from '../shared/settings.js';

const host = () => import('../host.js');

/**
 * The data directory to work on, or null for the API: `--data-dir`, then VESSEL_DATA_DIR, name
 * one; otherwise the API when a service or a token is configured (VESSEL_URL, VESSEL_TOKEN or
 * `vessel login`'s file: a user who named a service means it, and is told if the token is
 * missing rather than given a new database in the current directory), else the default data
 * directory (`./data`), as on a fresh host.
 */
export function tokenTarget(dataDirFlag: string | undefined, env: NodeJS.ProcessEnv = process.env): string | null {
  if (dataDirFlag !== undefined) return dataDirFlag;
  if (env.VESSEL_DATA_DIR) return env.VESSEL_DATA_DIR;
  return env.VESSEL_URL || env.VESSEL_TOKEN || existsSync(configPath(env)) ? null : './data';
}

const withDataDir = (command: Command): Command =>
  command.option('--data-dir <dir>', "work on this data directory directly, not through the API (default when no token is configured: $VESSEL_DATA_DIR or ./data)");

const state = (t: Token): string => (t.revoked_at === null ? 'active' : `revoked ${age(t.revoked_at)} ago`);

function printToken(ctx: Context, t: Token | TokenCreated): void {
  if (ctx.json) return printJson(t);
  printFields({
    ...('token' in t ? { token: t.token } : {}),
    id: t.id,
    tenant: t.tenant,
    name: t.name,
    scopes: t.scopes.join(','),
    created: `${t.created_at} (${age(t.created_at)} ago)`,
    state: state(t),
  });
}

/** Runs `api` through the API, or `local` on the data directory tokenTarget() names. */
const either =
  <A extends unknown[]>(api: (ctx: Context, ...args: A) => Promise<void>, local: (dataDir: string, ...args: A) => Promise<void>) =>
  async (...all: unknown[]): Promise<void> => {
    const flags = all.at(-2) as { dataDir?: string };
    const dataDir = tokenTarget(flags.dataDir);
    if (dataDir !== null) return local(dataDir, ...(all.slice(0, -1) as A));
    return clientAction(api)(...all);
  };

interface CreateFlags {
  tenant: string;
  scopes: string;
  name?: string;
}

export function registerTokenCommands(program: Command): void {
  const token = program
    .command('token')
    .description('API bearer tokens: through the API with an admin token, or on the data directory with --data-dir (docs/cli.md, "Tokens")');

  withDataDir(
    withJson(
      token
        .command('create')
        .description('make a token; its value is printed once, and never shown again')
        .requiredOption('--tenant <tenant>', 'tenant the token acts for')
        .requiredOption('--scopes <list>', 'comma-separated scopes, e.g. runtimes:read,exec (admin = all)')
        .option('--name <name>', 'a label for the token (default "token")'),
    ),
  ).action(
    either(
      async (ctx, flags: CreateFlags) => {
        const scopes = flags.scopes.split(',').map((s) => s.trim()).filter(Boolean) as TokenCreated['scopes'];
        printToken(ctx, await ctx.vessel.tokens.create({ tenant: flags.tenant, scopes, ...(flags.name === undefined ? {} : { name: flags.name }) }));
      },
      async (dataDir, flags: CreateFlags) => (await host()).createToken(dataDir, { tenant: flags.tenant, scopes: flags.scopes, name: flags.name ?? 'token' }),
    ),
  );

  withDataDir(
    withJson(
      token
        .command('ls')
        .alias('list')
        .description('list tokens, newest first, revoked ones included (never a value)')
        .option('--tenant <tenant>', "only this tenant's")
        .option('--limit <n>', 'at most this many', positiveNumber),
    ),
  ).action(
    either(
      async (ctx, flags: { tenant?: string; limit?: number }) => {
        const all = await take(ctx.vessel.tokens.list({ ...pageSize(flags.limit), tenant: flags.tenant }), flags.limit);
        if (ctx.json) return printJson(all);
        printTable(['ID', 'TENANT', 'NAME', 'SCOPES', 'AGE', 'STATE'], all.map((t) => [t.id, t.tenant, t.name, t.scopes.join(','), age(t.created_at), state(t)]));
      },
      async (dataDir, flags: { tenant?: string; limit?: number }) => (await host()).listTokens(dataDir, flags),
    ),
  );

  withDataDir(withJson(token.command('get').alias('show').description("show a token's record (never its value)").argument('<id>', 'token id'))).action(
    either(
      async (ctx, id: string) => printToken(ctx, await ctx.vessel.tokens.get(id)),
      async (dataDir, id: string) => (await host()).showToken(dataDir, id),
    ),
  );

  withDataDir(
    withJson(
      token
        .command('revoke')
        .alias('rm')
        .description('revoke a token; through the API, not the bootstrap admin token nor the one in use')
        .argument('<id>', 'token id'),
    ),
  ).action(
    either(
      async (ctx, id: string) => {
        const revoked = await ctx.vessel.tokens.revoke(id);
        if (ctx.json) return printJson(revoked);
        process.stdout.write(`revoked ${revoked.id}\n`);
      },
      async (dataDir, id: string) => (await host()).revokeToken(dataDir, id),
    ),
  );
}
