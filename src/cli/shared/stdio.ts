/**
 * The CLI's own stdin and stdout: bytes written at the reader's pace, stdin read whole, and
 * values that must not be echoed or passed in argv (secrets, tokens) read from a file, a pipe or
 * a prompt that does not echo.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { CliError, EXIT, UsageError } from './exit-codes.js';

/** Resolves once the stream took the bytes, so that a slow reader slows the producer instead of filling memory. */
export function writeTo(stream: NodeJS.WritableStream, bytes: Uint8Array): Promise<void> {
  // A reader that went away (EPIPE) is reported to the callback below; without a listener the
  // same error, emitted as an event too, would end the process before the caller could react.
  if (stream.listenerCount('error') === 0) stream.on('error', () => undefined);
  return new Promise((resolve, reject) => {
    stream.write(bytes, (err) => (err ? reject(err) : resolve()));
  });
}

export async function readAll(stream: NodeJS.ReadableStream = process.stdin): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of stream) chunks.push(typeof chunk === 'string' ? Buffer.from(chunk) : chunk);
  return Buffer.concat(chunks);
}

/** Text the API takes as a JSON string: bytes that are not UTF-8 would be changed on the way, so they are refused. */
export function utf8(bytes: Uint8Array, what: string): string {
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(bytes);
  } catch {
    throw new UsageError(`${what} is not UTF-8 text`);
  }
}

/** Reads a line from the terminal without echoing it; Ctrl-C gives up. */
function promptHidden(question: string): Promise<string> {
  const input = process.stdin;
  process.stderr.write(question);
  input.setRawMode(true);
  input.resume();
  let typed = '';
  return new Promise((resolve, reject) => {
    const done = (error?: Error) => {
      input.off('data', onData);
      input.setRawMode(false);
      input.pause();
      process.stderr.write('\n');
      if (error === undefined) resolve(typed);
      else reject(error);
    };
    const onData = (data: Buffer) => {
      for (const ch of data.toString('utf8')) {
        if (ch === '\r' || ch === '\n') return done();
        if (ch === '\u0003') return done(new CliError('interrupted', EXIT.interrupted));
        if (ch === '\u007f' || ch === '\b') typed = [...typed].slice(0, -1).join('');
        else typed += ch;
      }
    };
    input.on('data', onData);
  });
}

/**
 * A secret value: from `fromFile` (`-` for stdin), else stdin, or a prompt on a terminal. One
 * final newline is dropped, since `echo` and editors add one and a value cannot hold one.
 */
export async function readSecretValue(what: string, fromFile: string | undefined): Promise<string> {
  let text: string;
  if (fromFile !== undefined && fromFile !== '-') text = utf8(await readFile(fromFile), `${fromFile}`);
  else if (fromFile === undefined && process.stdin.isTTY) text = await promptHidden(`${what}: `);
  else text = utf8(await readAll(), `the ${what} on stdin`);
  const value = text.replace(/\r?\n$/, '');
  if (value === '') throw new UsageError(`the ${what} is empty`);
  return value;
}

/**
 * A value given as an argument is refused with a message that says where it goes instead, and
 * never repeats it (commander's own message would not either, but would not say why).
 */
export const refuseValueInArgv = (what: string, fileOption: string) => (command: Command) => {
  if (command.args.length > command.registeredArguments.length) {
    throw new UsageError(`${what} is never taken from the command line, where ps and the shell's history keep it: pipe it to stdin, or use ${fileOption}`);
  }
};
