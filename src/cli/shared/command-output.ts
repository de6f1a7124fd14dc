/**
 * A streamed command's output to the CLI's own stdout and stderr, byte for byte and at the
 * reader's pace, ending with the command's exit status: what `vessel exec` prints.
 */
import type { ExecStreamRequest, Runtime } from 'vessel/client';
import { CliError } from './exit-codes.js';
import { writeTo } from './stdio.js';

/** As a shell reports a command that wrote to a pipe nobody reads (SIGPIPE). */
export const EXIT_BROKEN_PIPE = 141;

export async function streamCommand(rt: Runtime, body: ExecStreamRequest): Promise<number> {
  const stream = await rt.execStream(body);
  try {
    for await (const event of stream) {
      if (event.type === 'stdout') await writeTo(process.stdout, event.chunk.bytes);
      else if (event.type === 'stderr') await writeTo(process.stderr, event.chunk.bytes);
      else if (event.type === 'exit') return event.exit_code;
    }
  } catch (err) {
    // `… | head`: leaving the loop closes the stream, which kills the command.
    if ((err as NodeJS.ErrnoException).code === 'EPIPE') return EXIT_BROKEN_PIPE;
    throw err;
  }
  throw new CliError('the output stream ended without the command exiting');
}
