/** `vessel runtime create|ls|get|rm|start|stop|pause|resume|suspend|patch`. */
import { Option, type Command } from 'commander';
import type { Runtime, RuntimeCreateRequest, RuntimeInfo, RuntimePatchRequest, RuntimeStatus } from 'vessel/client';
import { clientAction, pageSize, removeEach, take, withJson, type Context } from '../shared/client.js';
import { UsageError } from '../shared/exit-codes.js';
import { age, plural, printFields, printJson, printTable } from '../shared/output.js';
import { visibleLine } from '../shared/visible.js';
import { collect, ingressSpec, keyValue, positiveNumber, type IngressSpec } from '../shared/parse.js';
import { describeLabels, describeLifecycle, lifecycleBody, patchedLabels, removeLabelOption, settingsBody, withSettingsOptions, type SettingsFlags } from './runtime-settings.js';

/** The options a runtime is made with, whether created or forked (a fork keeps its checkpoint's memory and vCPUs). */
export interface NetworkFlags {
  allowHost?: string[];
  openEgress?: boolean;
  port?: IngressSpec[];
}

export function withNetworkOptions(command: Command): Command {
  return command
    .option('--allow-host <pattern>', 'a host it may reach (repeat for more); example.com or *.example.com', collect)
    .option('--open-egress', 'let it reach any public address, without filtering or audits')
    .option('--port <port[/protocol]>', 'serve this port of the runtime through ingress, http (default) or https (repeat for more)', ingressSpec);
}

export function networkBody(flags: NetworkFlags): Pick<RuntimeCreateRequest, 'egress_policy' | 'ingress_specs'> {
  return {
    ...(flags.allowHost === undefined && flags.openEgress === undefined
      ? {}
      : { egress_policy: { enabled: flags.openEgress !== true, allowed_hosts: flags.allowHost ?? [] } }),
    ...(flags.port === undefined ? {} : { ingress_specs: flags.port }),
  };
}

const memory = (r: RuntimeInfo['resources']): string =>
  `${r.limits.memory_mib} MiB${r.requests.memory_mib === r.limits.memory_mib ? '' : ` (request ${r.requests.memory_mib} MiB)`}`;

const egress = (p: RuntimeInfo['egress_policy']): string =>
  !p.enabled ? 'open' : p.allowed_hosts.length === 0 ? 'filtered, no host allowed' : `filtered, allowed: ${p.allowed_hosts.join(', ')}`;

export function printRuntime(ctx: Context, info: RuntimeInfo): void {
  if (ctx.json) return printJson(info);
  printFields({
    name: info.display_name,
    id: info.id,
    status: info.status,
    message: info.status_message,
    vcpus: String(info.resources.vcpus),
    memory: memory(info.resources),
    'at next start': info.pending_resources === undefined ? undefined : `${plural(info.pending_resources.vcpus, 'vCPU')}, ${memory(info.pending_resources)}`,
    egress: egress(info.egress_policy),
    ingress: info.ingress_specs.length === 0 ? undefined : info.ingress_specs.map((s) => `${s.runtime_port}/${s.protocol}`).join(', '),
    urls: info.ingress_urls.length === 0 ? undefined : info.ingress_urls.map((u) => u.url).join(' '),
    labels: describeLabels(info.labels),
    env: info.env_names.length === 0 ? undefined : info.env_names.join(', '),
    lifecycle: describeLifecycle(info.lifecycle),
    created: `${info.created_at} (${age(info.created_at)} ago)`,
  });
}

type MemoryFlags = { memory?: number; memoryRequest?: number };

/** --memory and --memory-request, for create (`initially`) and patch. */
function withMemoryOptions(command: Command, initially: boolean): Command {
  return command
    .option('--memory <mib>', `memory limit in MiB${initially ? ' (default 512)' : ' (applies at the next start)'}`, positiveNumber)
    .option('--memory-request <mib>', `memory the guest keeps, in MiB; the balloon gives back the rest${initially ? ' (default: the limit)' : ' (applies at once)'}`, positiveNumber);
}

const memoryBody = (flags: MemoryFlags) => ({
  ...(flags.memory === undefined ? {} : { limits: { memory_mib: flags.memory } }),
  ...(flags.memoryRequest === undefined ? {} : { requests: { memory_mib: flags.memoryRequest } }),
});

type CreateFlags = NetworkFlags & MemoryFlags & SettingsFlags & { vcpus?: number; checkpoint?: string; env?: Record<string, string> };

function createBody(name: string, flags: CreateFlags): RuntimeCreateRequest {
  const resources = { ...(flags.vcpus === undefined ? {} : { vcpus: flags.vcpus }), ...memoryBody(flags) };
  return {
    display_name: name,
    ...(Object.keys(resources).length === 0 ? {} : { resources }),
    ...networkBody(flags),
    ...(flags.checkpoint === undefined ? {} : { checkpoint: flags.checkpoint }),
    ...(flags.env === undefined ? {} : { env: flags.env }),
    ...settingsBody(flags),
  };
}

type PatchFlags = MemoryFlags & SettingsFlags & { allowHost?: string[]; addHost?: string[]; removeHost?: string[]; egress?: 'filtered' | 'open'; removeLabel?: string[] };

/** The PATCH body. An egress change is a whole policy, so the current one is read when only a part changes. */
async function patchBody(rt: Runtime, flags: PatchFlags): Promise<RuntimePatchRequest> {
  const body: RuntimePatchRequest = {};
  if ([flags.allowHost, flags.addHost, flags.removeHost, flags.egress].some((f) => f !== undefined)) {
    const current = rt.info.egress_policy;
    const removed = new Set(flags.removeHost ?? []);
    const hosts = flags.allowHost ?? [...current.allowed_hosts, ...(flags.addHost ?? [])].filter((h) => !removed.has(h));
    body.egress_policy = { enabled: flags.egress === undefined ? current.enabled : flags.egress === 'filtered', allowed_hosts: [...new Set(hosts)] };
  }
  if (flags.memory !== undefined || flags.memoryRequest !== undefined) body.resources = memoryBody(flags);
  const labels = patchedLabels(rt.info.labels, flags.label, flags.removeLabel);
  if (labels !== undefined) body.labels = labels;
  const lifecycle = lifecycleBody(flags);
  if (lifecycle !== undefined) body.lifecycle = lifecycle;
  if (Object.keys(body).length === 0) {
    throw new UsageError('nothing to change: give --memory, --memory-request, --allow-host, --add-host, --remove-host, --egress, --label, --remove-label, --idle-timeout, --on-idle or --auto-delete');
  }
  return body;
}

/** `--label key=value` or `--label key` for the list filter: the SDK's labels (true: the key alone). */
function labelSelectors(selectors: string[] | undefined): Record<string, string | true> | undefined {
  if (selectors === undefined) return undefined;
  return Object.fromEntries(selectors.map((s): [string, string | true] => (s.includes('=') ? [s.slice(0, s.indexOf('=')), s.slice(s.indexOf('=') + 1)] : [s, true])));
}

const LIFECYCLE = {
  start: 'boot a shut-down, crashed or suspended runtime',
  stop: 'shut a running or paused runtime down (its disk is kept)',
  pause: 'freeze a running runtime in memory',
  resume: 'carry on a paused or suspended runtime',
  suspend: 'save a running runtime to disk (memory and processes) and free its VM; resume brings it back',
} as const;

export function registerRuntimeCommands(program: Command): void {
  const runtime = program.command('runtime').description('runtimes: create, list, inspect, change, delete and move them through their lifecycle');

  const create = runtime
    .command('create')
    .description('create a runtime; answers once its VM runs')
    .argument('<name>', 'its display name')
    .option('--vcpus <n>', 'virtual CPUs (default 1)', positiveNumber)
    .option('--env <name=value>', 'an environment variable of every exec, process and terminal in it (repeat for more; its names are shown, not its values)', keyValue);
  withJson(
    withSettingsOptions(
      withNetworkOptions(withMemoryOptions(create, true).option('--checkpoint <checkpoint>', 'fork it from this checkpoint (id or name); vessel fork does the same')),
      'a label of your own (repeat for more)',
    ),
  ).action(
    clientAction(async (ctx, name: string, flags: CreateFlags) => {
      printRuntime(ctx, (await ctx.vessel.runtimes.create(createBody(name, flags))).info);
    }),
  );

  withJson(
    runtime
      .command('ls')
      .alias('list')
      .description('list runtimes, newest first')
      .option('--limit <n>', 'at most this many', positiveNumber)
      .option('--label <key[=value]>', 'only runtimes with this label, or this key at all (repeat: all must hold)', collect)
      .option('--status <status>', 'only runtimes in this status (repeat, or a comma list: any of them)', collect)
      .option('-q, --quiet', 'names only, one a line'),
  ).action(
    clientAction(async (ctx, flags: { limit?: number; quiet?: boolean; label?: string[]; status?: string[] }) => {
      const filter = { labels: labelSelectors(flags.label), status: flags.status?.flatMap((s) => s.split(',')) as RuntimeStatus[] | undefined };
      const all = (await take(ctx.vessel.runtimes.list({ ...pageSize(flags.limit), ...filter }), flags.limit)).map((rt) => rt.info);
      if (ctx.json) return printJson(all);
      if (flags.quiet === true) return void process.stdout.write(all.map((r) => `${visibleLine(r.display_name)}\n`).join(''));
      printTable(
        ['NAME', 'STATUS', 'VCPUS', 'MEMORY', 'EGRESS', 'AGE', 'ID', 'LABELS'],
        all.map((r) => [
          r.display_name,
          r.status,
          String(r.resources.vcpus),
          `${r.resources.limits.memory_mib} MiB`,
          r.egress_policy.enabled ? plural(r.egress_policy.allowed_hosts.length, 'host') : 'open',
          age(r.created_at),
          r.id,
          describeLabels(r.labels) ?? '',
        ]),
      );
    }),
  );

  withJson(runtime.command('get').alias('show').description('show a runtime').argument('<runtime>', 'id or name')).action(
    clientAction(async (ctx, ref: string) => printRuntime(ctx, (await ctx.vessel.runtimes.get(ref)).info)),
  );

  withJson(runtime.command('rm').alias('delete').description('delete runtimes, their VMs, disks and rules, from any state').argument('<runtime...>', 'ids or names')).action(
    clientAction(async (ctx, refs: string[]) => removeEach(ctx, refs, async (ref) => (await ctx.vessel.runtimes.get(ref)).delete())),
  );

  for (const [op, description] of Object.entries(LIFECYCLE) as [keyof typeof LIFECYCLE, string][]) {
    withJson(runtime.command(op).description(description).argument('<runtime>', 'id or name')).action(
      clientAction(async (ctx, ref: string) => {
        const rt = await (await ctx.vessel.runtimes.get(ref))[op]();
        if (ctx.json) return printJson(rt.info);
        process.stdout.write(`${visibleLine(rt.name)}: ${rt.status}\n`);
      }),
    );
  }

  const patch = runtime.command('patch').description("change a runtime's egress policy, memory, labels or lifecycle settings").argument('<runtime>', 'id or name');
  withJson(
    removeLabelOption(withSettingsOptions(withMemoryOptions(patch, false), 'set a label, keeping the others (repeat for more)'))
      .addOption(new Option('--allow-host <pattern>', 'replace the allowed hosts (repeat for more)').argParser(collect).conflicts(['addHost', 'removeHost']))
      .option('--add-host <pattern>', 'allow one more host (repeat for more)', collect)
      .option('--remove-host <pattern>', 'no longer allow a host (repeat for more)', collect)
      .addOption(new Option('--egress <mode>', 'filtered (only allowed hosts, audited) or open').choices(['filtered', 'open'])),
  ).action(
    clientAction(async (ctx, ref: string, flags: PatchFlags) => {
      const rt = await ctx.vessel.runtimes.get(ref);
      printRuntime(ctx, (await rt.patch(await patchBody(rt, flags))).info);
    }),
  );
}
