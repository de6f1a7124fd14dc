/**
 * What every client command shares: the SDK client made from the settings, --json, and one way
 * to end: errors printed once (as an envelope on stderr with --json, a line otherwise) and the
 * exit status of exit-codes.ts.
 */
import { setFlagsFromString } from 'node:v8';
import type { Command } from 'commander';
import type { Vessel } from 'vessel/client';
// The SDK's error class alone: the SDK itself is loaded only by a command that calls the service.
import { VesselError } from '../../../client/errors.js';
import { CliError, EXIT, exitCodeOf } from './exit-codes.js';
import { printJson } from './output.js';
import { resolveSettings } from './settings.js';
import { visibleLine } from './visible.js';

export interface Context {
  json: boolean;
  /** Made on first use, so that commands needing no service (completion) need no token. */
  readonly vessel: Vessel;
}

export function withJson(command: Command): Command {
  return command.option('--json', 'print the API objects as JSON instead of a table');
}

/** Codes of failures of the CLI itself, beside the API's codes: `usage` for a command line it cannot do as asked, `cli` for the rest. */
const cliCode = (err: unknown): string => (err instanceof CliError && err.exitCode === EXIT.usage ? 'usage' : 'cli');

/** One failure, once: the API's envelope on stderr with --json, else one line `vessel: <message> (<code>)`. */
export function reportError(err: unknown, json: boolean, stderr: Pick<NodeJS.WritableStream, 'write'> = process.stderr): void {
  // A line, whatever the message holds: a script reading stderr line by line sees one error.
  const message = (err instanceof Error ? err.message : String(err)).replace(/\s*\n\s*/g, ' ');
  const code = err instanceof VesselError ? err.code : cliCode(err);
  if (json) {
    stderr.write(`${JSON.stringify({ error: { code, message } })}\n`);
    return;
  }
  // A message may quote what a guest wrote (a path, a name): shown, not obeyed, as in tables.
  // The request id finds the failure in the service's log; worth printing where the service failed.
  const requestId = err instanceof VesselError && err.requestId !== undefined && (code === 'internal' || code === 'unavailable') ? `, request ${err.requestId}` : '';
  stderr.write(`vessel: ${visibleLine(message)} (${code}${requestId})\n`);
}

/** Exits once what was written has left: process.exit() drops output still queued on a pipe. */
export async function exitWith(code: number): Promise<never> {
  await Promise.all([process.stdout, process.stderr].map((s) => new Promise((resolve) => s.write('', resolve))));
  process.exit(code);
}

/**
 * Wraps a command's work: `args` are commander's (the arguments, then the options). The work
 * returns its exit status (default 0). The process exits when it is done rather than waiting for
 * idle keep-alive connections to close.
 */
export function clientAction<A extends unknown[]>(work: (ctx: Context, ...args: A) => Promise<number | void>) {
  return async (...all: unknown[]): Promise<void> => {
    const command = all.at(-1) as Command;
    const json = command.optsWithGlobals<{ json?: boolean }>().json === true;
    // Node 20's fetch compiles undici's HTTP parser (llhttp, WebAssembly) with V8's optimizing
    // compiler too, in the background, and the exit below waits for that job: about 0.3 s of every
    // command. The baseline compiler alone serves a command's few responses. Node 24 has no such
    // wait. Set before the first fetch, which is when the parser is compiled.
    if (Number(process.versions.node.split('.')[0]) < 22) setFlagsFromString('--liftoff-only');
    // Loaded here, not when the program is built: --help, usage errors and completion never need it.
    const sdk = await import('vessel/client');
    let vessel: Vessel | undefined;
    const ctx: Context = {
      json,
      get vessel() {
        if (vessel === undefined) {
          const settings = resolveSettings();
          vessel = new sdk.Vessel({ url: settings.url, token: settings.token });
        }
        return vessel;
      },
    };
    let code: number;
    try {
      code = (await work(ctx, ...(all.slice(0, -1) as A))) ?? EXIT.ok;
    } catch (err) {
      reportError(err, json);
      code = exitCodeOf(err);
    }
    await exitWith(code);
  };
}

/** The page size that a --limit asks for: no more than needed, within the API's 1000. */
export const pageSize = (limit: number | undefined): { limit?: number } => (limit === undefined ? {} : { limit: Math.min(limit, 1000) });

/** Up to `limit` items, following pages only as far as needed. */
export async function take<T>(items: AsyncIterable<T>, limit: number | undefined): Promise<T[]> {
  const taken: T[] = [];
  if (limit === 0) return taken;
  for await (const item of items) {
    taken.push(item);
    if (taken.length === limit) break;
  }
  return taken;
}

/** Deletes each in turn, saying so as it goes; the first failure stops the rest, so nothing is deleted past an error unseen. */
export async function removeEach(ctx: Context, refs: string[], remove: (ref: string) => Promise<void>): Promise<void> {
  for (const ref of refs) {
    await remove(ref);
    if (!ctx.json) process.stdout.write(`deleted ${ref}\n`);
  }
  if (ctx.json) printJson({ deleted: refs });
}
