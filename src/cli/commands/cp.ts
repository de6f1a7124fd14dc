/**
 * `vessel cp SRC DST`: a file or a directory, into or out of a runtime, written `RUNTIME:/path`
 * on the runtime's side, with docker cp's rules (cp-transfer.ts does the copying).
 */
import type { Command } from 'commander';
import { clientAction, withJson } from '../shared/client.js';

export function registerCpCommand(program: Command): void {
  withJson(
    program
      .command('cp')
      .description('copy a file or a directory into or out of a runtime (RUNTIME:/path on its side)')
      .argument('<source>', 'a local path, RUNTIME:/path, or - for stdin')
      .argument('<destination>', 'a local path, RUNTIME:/path, or - for stdout')
      .option('--no-progress', 'no progress bar, even on a terminal'),
  )
    .addHelpText(
      'after',
      '\nExamples:\n  vessel cp ./app demo:/srv          # /srv/app, or /srv itself if it does not exist\n  vessel cp ./app/. demo:/srv        # the contents of ./app into /srv\n  vessel cp demo:/var/log ./logs\n  vessel cp demo:/etc/hostname -\n  vessel cp demo:/srv - > srv.tar    # a directory to stdout is a tar stream',
    )
    .action(
      // The work, with tar and the progress bar, is loaded only when a copy runs: not for --help, nor any other command.
      clientAction(async (ctx, source: string, destination: string, flags: { progress: boolean }) => (await import('./cp-transfer.js')).copy(ctx, source, destination, flags)),
    );
}
