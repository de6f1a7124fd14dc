/** `vessel checkpoint create|ls|get|rm` and `vessel fork CHECKPOINT NAME`. */
import type { Command } from 'commander';
import type { Checkpoint } from 'vessel/client';
import { clientAction, pageSize, removeEach, take, withJson, type Context } from '../shared/client.js';
import { age, printFields, printJson, printTable } from '../shared/output.js';
import { positiveNumber } from '../shared/parse.js';
import { networkBody, printRuntime, withNetworkOptions, type NetworkFlags } from './runtime.js';

function printCheckpoint(ctx: Context, c: Checkpoint): void {
  if (ctx.json) return printJson(c);
  printFields({
    name: c.display_name,
    id: c.id,
    state: c.state,
    message: c.state_message,
    vcpus: String(c.resources.vcpus),
    memory: `${c.resources.limits.memory_mib} MiB`,
    system: c.system ? 'yes (the service template of an image)' : undefined,
    source: c.source_runtime_id ?? undefined,
    created: `${c.created_at} (${age(c.created_at)} ago)`,
  });
}

export function registerCheckpointCommands(program: Command): void {
  const checkpoint = program.command('checkpoint').description("checkpoints: a runtime's memory, disk and processes, to fork from");

  withJson(
    checkpoint
      .command('create')
      .description('checkpoint a runtime; it pauses for the capture and carries on')
      .argument('<runtime>', 'id or name')
      .option('--name <name>', 'its display name (default <runtime>-<time>)')
      .option('--no-wait', 'answer at once, while it is still being captured (state creating)'),
  ).action(
    clientAction(async (ctx, ref: string, flags: { name?: string; wait: boolean }) => {
      const rt = await ctx.vessel.runtimes.get(ref);
      const created = await rt.checkpoint(flags.name === undefined ? {} : { name: flags.name });
      printCheckpoint(ctx, flags.wait ? await ctx.vessel.checkpoints.waitUntilReady(created) : created);
    }),
  );

  withJson(
    checkpoint
      .command('ls')
      .alias('list')
      .description('list checkpoints, newest first')
      .option('--all', "include the service's own templates (system checkpoints)")
      .option('--limit <n>', 'at most this many', positiveNumber),
  ).action(
    clientAction(async (ctx, flags: { all?: boolean; limit?: number }) => {
      const all = await take(ctx.vessel.checkpoints.list({ include_system: flags.all === true, ...pageSize(flags.limit) }), flags.limit);
      if (ctx.json) return printJson(all);
      printTable(
        ['NAME', 'STATE', 'VCPUS', 'MEMORY', 'AGE', 'ID'],
        all.map((c) => [c.display_name + (c.system ? ' (system)' : ''), c.state, String(c.resources.vcpus), `${c.resources.limits.memory_mib} MiB`, age(c.created_at), c.id]),
      );
    }),
  );

  withJson(checkpoint.command('get').alias('show').description('show a checkpoint').argument('<checkpoint>', 'id or name')).action(
    clientAction(async (ctx, ref: string) => printCheckpoint(ctx, await ctx.vessel.checkpoints.get(ref))),
  );

  withJson(checkpoint.command('rm').alias('delete').description('delete checkpoints (their files stay while forks stand on them)').argument('<checkpoint...>', 'ids or names')).action(
    clientAction(async (ctx, refs: string[]) => removeEach(ctx, refs, (ref) => ctx.vessel.checkpoints.delete(ref))),
  );

  withJson(
    withNetworkOptions(
      program
        .command('fork')
        .description("a new runtime from a checkpoint: its memory, disk and processes, and its vCPUs and memory; waits until the checkpoint is ready")
        .argument('<checkpoint>', 'id or name')
        .argument('<name>', "the new runtime's display name"),
    ),
  ).action(
    clientAction(async (ctx, checkpointRef: string, name: string, flags: NetworkFlags) => {
      printRuntime(ctx, (await ctx.vessel.runtimes.fork(checkpointRef, { display_name: name, ...networkBody(flags) })).info);
    }),
  );
}
