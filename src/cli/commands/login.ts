/**
 * `vessel login` and `vessel logout`: the config file that gives the client commands the
 * service's URL and a token, written with mode 0600. The token is read like a secret's value:
 * stdin, a prompt without echo, or a file, never an argument.
 */
import type { Command } from 'commander';
import { VesselError } from '../../../client/errors.js';
import { clientAction, withJson } from '../shared/client.js';
import { printJson } from '../shared/output.js';
import { configPath, removeConfig, resolveUrl, writeConfig } from '../shared/settings.js';
import { readSecretValue, refuseValueInArgv } from '../shared/stdio.js';

/** A request that any valid token may make: permission_denied still says the token is known. */
async function verify(url: string, token: string): Promise<void> {
  const { Vessel } = await import('vessel/client');
  const vessel = new Vessel({ url, token, retry: { maxRetries: 0 } });
  try {
    await vessel.runtimes.list({ limit: 1 }).pages().next();
  } catch (err) {
    if (err instanceof VesselError && err.code === 'permission_denied') return;
    throw err;
  }
}

export function registerLoginCommands(program: Command): void {
  withJson(
    program
      .command('login')
      .description(`save the service's URL and a token for the other commands, in ${configPath()} (mode 0600)`)
      .option('--url <url>', 'where the service listens (default: VESSEL_URL, the saved URL, or http://127.0.0.1:8080)')
      .option('--token-file <path>', 'read the token from this file (- for stdin) instead of stdin or a prompt')
      .option('--no-verify', 'save without checking the token against the service'),
  )
    .addHelpText('after', '\nExamples:\n  vessel login --url http://127.0.0.1:8080 < data/admin-token\n  vessel login --url https://vessel.example     # prompts for the token')
    .allowExcessArguments()
    .hook('preAction', refuseValueInArgv('the token', '--token-file'))
    .action(
      clientAction(async (ctx, flags: { url?: string; tokenFile?: string; verify: boolean }) => {
        const url = (flags.url ?? resolveUrl()).replace(/\/+$/, '');
        const token = await readSecretValue('token', flags.tokenFile);
        if (flags.verify) await verify(url, token);
        const path = configPath();
        writeConfig(path, { url, token });
        if (ctx.json) printJson({ url, config: path });
        else process.stdout.write(`logged in to ${url}; settings saved in ${path}\n`);
      }),
    );

  withJson(program.command('logout').description('remove the saved URL and token')).action(
    clientAction(async (ctx) => {
      const path = configPath();
      const removed = removeConfig(path);
      if (ctx.json) printJson({ config: path, removed });
      else process.stdout.write(removed ? `removed ${path}\n` : `no settings at ${path}\n`);
    }),
  );
}
