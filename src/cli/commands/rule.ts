/**
 * `vessel rule create|ls|get|rm`: secret injection rules, which put a secret into a runtime's
 * outbound requests to matching hosts (as a header, and optionally a query parameter) without
 * the guest ever holding it (docs/network.md, "Secret injection").
 */
import type { Command } from 'commander';
import type { SecretInjectionRule } from 'vessel/client';
import { clientAction, pageSize, removeEach, take, withJson, type Context } from '../shared/client.js';
import { printFields, printJson, printTable } from '../shared/output.js';
import { positiveNumber } from '../shared/parse.js';

interface CreateFlags {
  secret: string;
  host: string;
  path?: string;
  header: string;
  format?: string;
  param?: string;
  paramFormat?: string;
}

/** What a rule puts into a request, from its configuration as stored. */
function injects(rule: SecretInjectionRule): string {
  try {
    const config = JSON.parse(rule.injection_config_json) as { headerName?: string; paramName?: string };
    return [config.headerName && `header ${config.headerName}`, config.paramName && `param ${config.paramName}`].filter(Boolean).join(', ');
  } catch {
    return rule.injection_config_json;
  }
}

function printRule(ctx: Context, r: SecretInjectionRule): void {
  if (ctx.json) return printJson(r);
  printFields({ id: r.id, runtime: r.runtime_display_name, secret: r.credential_display_name, host: r.host_pattern, path: r.path_pattern, injects: injects(r), config: r.injection_config_json });
}

export function registerRuleCommands(program: Command): void {
  const rule = program.command('rule').description("secret injection rules: a secret put into a runtime's outbound requests to matching hosts");

  withJson(
    rule
      .command('create')
      .description('inject a secret into requests of a runtime to matching hosts')
      .argument('<runtime>', 'id or name')
      .requiredOption('--secret <secret>', 'the secret (id or name)')
      .requiredOption('--host <pattern>', 'hosts it applies to: api.example.com or *.example.com')
      .option('--path <glob>', 'paths it applies to: * within a segment, ** across (default /**)')
      .requiredOption('--header <name>', 'the request header to set')
      .option('--format <template>', "the header's value, ${credential} standing for the secret (default ${credential})")
      .option('--param <name>', 'also set this query parameter')
      .option('--param-format <template>', "the parameter's value (default ${credential})"),
  )
    .addHelpText('after', "\nExample:\n  vessel rule create demo --secret gh --host api.github.com --header Authorization --format 'Bearer ${credential}'")
    .action(
      clientAction(async (ctx, ref: string, flags: CreateFlags) => {
        const rt = await ctx.vessel.runtimes.get(ref);
        const injection = {
          headerName: flags.header,
          ...(flags.format === undefined ? {} : { valueFormat: flags.format }),
          ...(flags.param === undefined ? {} : { paramName: flags.param }),
          ...(flags.paramFormat === undefined ? {} : { paramFormat: flags.paramFormat }),
        };
        printRule(ctx, await rt.rules.create({ secret: flags.secret, host: flags.host, injection, ...(flags.path === undefined ? {} : { path: flags.path }) }));
      }),
    );

  withJson(
    rule
      .command('ls')
      .alias('list')
      .description("list a runtime's rules, or every rule")
      .argument('[runtime]', 'id or name; without it, the rules of every runtime')
      .option('--limit <n>', 'at most this many', positiveNumber),
  ).action(
    clientAction(async (ctx, ref: string | undefined, flags: { limit?: number }) => {
      const source = ref === undefined ? ctx.vessel.rules : (await ctx.vessel.runtimes.get(ref)).rules;
      const all = await take(source.list(pageSize(flags.limit)), flags.limit);
      if (ctx.json) return printJson(all);
      printTable(['ID', 'RUNTIME', 'SECRET', 'HOST', 'PATH', 'INJECTS'], all.map((r) => [r.id, r.runtime_display_name, r.credential_display_name, r.host_pattern, r.path_pattern, injects(r)]));
    }),
  );

  withJson(rule.command('get').alias('show').description('show a rule').argument('<runtime>', 'id or name').argument('<rule>', 'rule id')).action(
    clientAction(async (ctx, ref: string, ruleId: string) => printRule(ctx, await (await ctx.vessel.runtimes.get(ref)).rules.get(ruleId))),
  );

  withJson(rule.command('rm').alias('delete').description('delete rules').argument('<rule...>', 'rule ids')).action(
    clientAction(async (ctx, ids: string[]) => removeEach(ctx, ids, (id) => ctx.vessel.rules.delete(id))),
  );
}
