/**
 * `vessel secret create|ls|get|rm`. A value comes from stdin (or a prompt that does not echo)
 * or from a file, never from an argument: argv is readable by every user of the host through
 * /proc and `ps`, and stays in the shell's history.
 */
import type { Command } from 'commander';
import type { Secret } from 'vessel/client';
import { clientAction, pageSize, removeEach, take, withJson, type Context } from '../shared/client.js';
import { age, printFields, printJson, printTable } from '../shared/output.js';
import { positiveNumber, wholeNumber } from '../shared/parse.js';
import { readSecretValue, refuseValueInArgv } from '../shared/stdio.js';

function printSecret(ctx: Context, s: Secret): void {
  if (ctx.json) return printJson(s);
  printFields({ name: s.display_name, id: s.id, 'cache ttl': `${s.cache_ttl_secs} s`, created: `${s.created_at} (${age(s.created_at)} ago)` });
}

export function registerSecretCommands(program: Command): void {
  const secret = program.command('secret').description('secrets: stored sealed, injected into egress by rules, never shown again');

  withJson(
    secret
      .command('create')
      .description('store a secret; its value is read from stdin (a prompt on a terminal) or --from-file, never from the command line')
      .argument('<name>', 'its display name')
      .option('--from-file <path>', 'read the value from this file (- for stdin); one final newline is dropped')
      .option('--cache-ttl <secs>', "how long the egress gateway may cache the value (default 0)", wholeNumber),
  )
    .addHelpText('after', '\nExamples:\n  vessel secret create gh < token.txt\n  pass show gh | vessel secret create gh\n  vessel secret create gh          # prompts, without echo')
    .allowExcessArguments()
    .hook('preAction', refuseValueInArgv('the secret value', '--from-file'))
    .action(
      clientAction(async (ctx, name: string, flags: { fromFile?: string; cacheTtl?: number }) => {
        const value = await readSecretValue('secret value', flags.fromFile);
        printSecret(ctx, await ctx.vessel.secrets.create({ name, value, ...(flags.cacheTtl === undefined ? {} : { cache_ttl_secs: flags.cacheTtl }) }));
      }),
    );

  withJson(secret.command('ls').alias('list').description('list secrets (names and ids, never values)').option('--limit <n>', 'at most this many', positiveNumber)).action(
    clientAction(async (ctx, flags: { limit?: number }) => {
      const all = await take(ctx.vessel.secrets.list(pageSize(flags.limit)), flags.limit);
      if (ctx.json) return printJson(all);
      printTable(['NAME', 'CACHE TTL', 'AGE', 'ID'], all.map((s) => [s.display_name, `${s.cache_ttl_secs}s`, age(s.created_at), s.id]));
    }),
  );

  withJson(secret.command('get').alias('show').description("show a secret's metadata").argument('<secret>', 'id or name')).action(
    clientAction(async (ctx, ref: string) => printSecret(ctx, await ctx.vessel.secrets.get(ref))),
  );

  withJson(secret.command('rm').alias('delete').description('delete secrets (refused while rules use them)').argument('<secret...>', 'ids or names')).action(
    clientAction(async (ctx, refs: string[]) => removeEach(ctx, refs, (ref) => ctx.vessel.secrets.delete(ref))),
  );
}
