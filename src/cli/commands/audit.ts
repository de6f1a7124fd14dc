/**
 * `vessel audit ls` and `vessel audit tail [-f]`: what runtimes tried to reach, and what the
 * egress gateway did about it. The API has no audit stream, so -f asks for the newest audits
 * again every --interval seconds and prints those it has not printed yet.
 */
import { Option, type Command } from 'commander';
import type { Audit, AuditListOptions, Vessel } from 'vessel/client';
import { VesselError } from '../../../client/errors.js';
import { clientAction, withJson } from '../shared/client.js';
import { formatTable, printJson, printJsonLine } from '../shared/output.js';
import { positiveNumber } from '../shared/parse.js';

/** A poll's page: audits come in batches every 250 ms, so more than this between two polls means a flood, and a second, larger read. */
const POLL_LIMIT = 100;
const MAX_LIMIT = 1000;

interface Details {
  action?: string;
  host?: string;
  ip?: string;
  port?: number;
  reason?: string;
  method?: string;
  path?: string;
  status?: number;
  count?: number;
}

/** What an audit says: an egress audit's kind-specific fields, or what a lifecycle timer did. */
function details(a: Audit): Details {
  const { egress, lifecycle } = a.payload;
  if (egress !== undefined) return (egress[egress.kind] ?? {}) as Details;
  return { action: lifecycle?.action, reason: lifecycle?.reason };
}

function destination(a: Audit): string {
  const d = details(a);
  switch (a.payload.egress?.kind) {
    case undefined:
      return a.payload.lifecycle?.runtime_name ?? '';
    case 'http_request':
      return `${d.method ?? ''} ${d.host ?? d.ip ?? ''}${d.path ?? ''}${d.status === undefined ? '' : ` -> ${d.status}`}`.trim();
    case 'icmp_drop':
      return `${d.count ?? '?'} packets`;
    default:
      return `${d.host ?? d.ip ?? '?'}:${d.port ?? '?'}`;
  }
}

/** Names for runtime ids; a token that may not list runtimes, or a runtime since deleted, shows the id. */
async function runtimeNames(vessel: Vessel): Promise<Map<string, string>> {
  const names = new Map<string, string>();
  try {
    for await (const rt of vessel.runtimes.list({ limit: MAX_LIMIT })) names.set(rt.id, rt.name);
  } catch (err) {
    if (!(err instanceof VesselError && err.code === 'permission_denied')) throw err;
  }
  return names;
}

const HEADERS = ['TIME', 'RUNTIME', 'KIND', 'ACTION', 'DESTINATION', 'REASON'] as const;

const row = (a: Audit, names: Map<string, string>): string[] => {
  const d = details(a);
  return [a.created_at, names.get(a.runtime_id) ?? a.runtime_id, a.payload.egress?.kind ?? a.category, d.action ?? '', destination(a), d.reason ?? ''];
};

type Filter = { runtime?: string; category?: 'egress' | 'lifecycle' };

function filterOptions(flags: Filter, limit: number): AuditListOptions {
  return { ...(flags.runtime === undefined ? {} : { runtime: flags.runtime }), ...(flags.category === undefined ? {} : { category: flags.category }), limit };
}

/** The newest audits, newest first: one page, since the API hands out no further ones for audits. */
async function newest(vessel: Vessel, flags: Filter, limit: number): Promise<Audit[]> {
  for await (const page of vessel.audits.list(filterOptions(flags, limit)).pages()) return page.data;
  return [];
}

function withFilters(command: Command): Command {
  return command
    .option('--runtime <runtime>', 'only this runtime (id or name; a deleted one by its id)')
    .addOption(new Option('--category <category>', 'only this category: egress (what runtimes reached), lifecycle (what lifecycle timers did)').choices(['egress', 'lifecycle']));
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

export function registerAuditCommands(program: Command): void {
  const audit = program.command('audit').description('audits: what runtimes tried to reach, allowed or denied, and what lifecycle timers did to them');

  withJson(withFilters(audit.command('ls').alias('list').description('list audits, newest first').option('--limit <n>', 'at most this many (1 to 1000, default 100)', positiveNumber))).action(
    clientAction(async (ctx, flags: Filter & { limit?: number }) => {
      const audits = await newest(ctx.vessel, flags, Math.min(flags.limit ?? POLL_LIMIT, MAX_LIMIT));
      if (ctx.json) return printJson(audits);
      const names = await runtimeNames(ctx.vessel);
      process.stdout.write(formatTable(HEADERS, audits.map((a) => row(a, names))));
    }),
  );

  withJson(
    withFilters(
      audit
        .command('tail')
        .description('the latest audits, oldest first; with -f, then each new one as it is recorded, until interrupted')
        .option('-f, --follow', 'keep printing new audits')
        .option('-n, --lines <n>', 'how many of the latest to print first (default 10)', (v) => Math.min(positiveNumber(v), MAX_LIMIT))
        .option('--interval <secs>', 'with -f, how often to ask for new audits (default 2)', positiveNumber),
    ),
  ).action(
    clientAction(async (ctx, flags: Filter & { follow?: boolean; lines?: number; interval?: number }) => {
      let names = ctx.json ? new Map<string, string>() : await runtimeNames(ctx.vessel);
      let header = !ctx.json;
      const print = async (audits: Audit[]) => {
        if (ctx.json) return audits.forEach(printJsonLine);
        if (audits.some((a) => !names.has(a.runtime_id))) names = await runtimeNames(ctx.vessel);
        const table = formatTable(HEADERS, audits.map((a) => row(a, names)));
        // The header once; later batches are rows of the same table (widths may differ a little).
        process.stdout.write(header ? table : table.slice(table.indexOf('\n') + 1));
        header = false;
      };
      const first = await newest(ctx.vessel, flags, Math.max(flags.lines ?? 10, POLL_LIMIT));
      await print(first.slice(0, flags.lines ?? 10).reverse());
      if (flags.follow !== true) return;
      let seen = new Set(first.map((a) => a.id));
      for (;;) {
        await sleep((flags.interval ?? 2) * 1000);
        let batch = await newest(ctx.vessel, flags, POLL_LIMIT);
        if (seen.size > 0 && batch.length === POLL_LIMIT && batch.every((a) => !seen.has(a.id))) batch = await newest(ctx.vessel, flags, MAX_LIMIT);
        const fresh = batch.filter((a) => !seen.has(a.id));
        // Only the window just read can come back; older ids need not be remembered.
        seen = new Set(batch.map((a) => a.id));
        if (fresh.length > 0) await print(fresh.reverse());
      }
    }),
  );
}
