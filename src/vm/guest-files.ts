/**
 * Files through the guest agent (guest-file-open/read/write/close), streamed in chunks in both
 * directions: a file is never held whole in memory on the host.
 */
import { Readable } from 'node:stream';
import { VesselError, invalidArgument, notFound } from '../core/errors.js';
import { GuestAgentError, type GuestAgentClient } from './guest-agent-client.js';

export const FILE_CHUNK_BYTES = 4 * 1024 * 1024;
/** How long (in polls, at most 20 ms apart) a mkdir or a sync in the guest may take: a minute. */
const GUEST_COMMAND_POLLS = 3000;

type Agent = () => Promise<GuestAgentClient>;

function mapFileError(err: unknown, path: string): unknown {
  if (!(err instanceof GuestAgentError)) return err;
  if (/No such file|ENOENT/i.test(err.desc)) return notFound('file', path);
  if (/Is a directory|EISDIR/i.test(err.desc)) return invalidArgument(`'${path}' is a directory, not a regular file`);
  if (/Not a directory|ENOTDIR/i.test(err.desc)) return invalidArgument(`a parent of '${path}' is not a directory`);
  if (/Permission denied|EACCES|Read-only/i.test(err.desc)) return new VesselError('failed_precondition', `'${path}' cannot be accessed: ${err.desc}`);
  if (/No space left/i.test(err.desc)) return new VesselError('failed_precondition', `the runtime's disk is full`);
  return err;
}

interface ReadReply {
  count: number;
  'buf-b64': string;
  eof: boolean;
}

/**
 * Opens the file and reads the first chunk before returning, so that a missing file or a
 * directory is reported as an error status rather than a broken 200 stream.
 */
export async function readGuestFile(agent: Agent, path: string): Promise<Readable> {
  const ga = await agent();
  let handle: number;
  let first: ReadReply;
  try {
    handle = await ga.call<number>('guest-file-open', { path, mode: 'r' });
  } catch (err) {
    throw mapFileError(err, path);
  }
  try {
    first = await ga.call<ReadReply>('guest-file-read', { handle, count: FILE_CHUNK_BYTES });
  } catch (err) {
    await ga.call('guest-file-close', { handle }).catch(() => undefined);
    throw mapFileError(err, path);
  }
  async function* chunks(): AsyncGenerator<Buffer> {
    try {
      let reply = first;
      for (;;) {
        if (reply.count > 0) yield Buffer.from(reply['buf-b64'], 'base64');
        if (reply.eof || reply.count === 0) return;
        reply = await (await agent()).call<ReadReply>('guest-file-read', { handle, count: FILE_CHUNK_BYTES });
      }
    } finally {
      await (await agent()).call('guest-file-close', { handle }).catch(() => undefined);
    }
  }
  return Readable.from(chunks(), { objectMode: false });
}

/** Runs a small guest command to its end (mkdir, sync) and returns its exit code. */
async function runToExit(ga: GuestAgentClient, path: string, arg: string[]): Promise<number> {
  const { pid } = await ga.call<{ pid: number }>('guest-exec', { path, arg, 'capture-output': true });
  for (let i = 0; ; i++) {
    const s = await ga.call<{ exited: boolean; exitcode?: number; signal?: number }>('guest-exec-status', { pid });
    if (s.exited) return s.exitcode ?? 128 + (s.signal ?? 0);
    if (i >= GUEST_COMMAND_POLLS) throw new Error(`${path} did not finish in the guest`);
    await new Promise((r) => setTimeout(r, i < 5 ? 2 : 20));
  }
}

async function openForWrite(agent: Agent, path: string): Promise<number> {
  const ga = await agent();
  try {
    return await ga.call<number>('guest-file-open', { path, mode: 'w' });
  } catch (err) {
    if (!(err instanceof GuestAgentError && /No such file/i.test(err.desc))) throw mapFileError(err, path);
  }
  // Missing parents: create them, then try once more.
  await runToExit(ga, '/bin/mkdir', ['-p', '--', parentOf(path)]);
  try {
    return await ga.call<number>('guest-file-open', { path, mode: 'w' });
  } catch (err) {
    throw mapFileError(err, path);
  }
}

const parentOf = (path: string): string => path.slice(0, path.lastIndexOf('/')) || '/';

/** The file and every directory above it: what must reach the disk for the file to be found after a crash. */
function fileAndAncestors(path: string): string[] {
  const out = [path];
  for (let p = path; p !== '/'; ) out.push((p = parentOf(p)));
  return out;
}

/**
 * Writes the file and makes it durable before answering: written, closed (which flushes qemu-ga's
 * buffer, and reports a write that failed late, ENOSPC included), then fsync'd with its parent
 * directories (coreutils `sync FILE...`), so that it is found, whole, after the VM crashes. The
 * host honours the guest's flushes (the overlay's cache mode is writeback with flushes).
 */
export async function writeGuestFile(agent: Agent, path: string, body: Readable, maxBytes: number): Promise<number> {
  const handle = await openForWrite(agent, path);
  let total = 0;
  let pending: Buffer[] = [];
  let pendingBytes = 0;
  const flush = async () => {
    if (pendingBytes === 0) return;
    const data = Buffer.concat(pending, pendingBytes);
    pending = [];
    pendingBytes = 0;
    try {
      await (await agent()).call('guest-file-write', { handle, 'buf-b64': data.toString('base64') }, 120_000);
    } catch (err) {
      throw mapFileError(err, path);
    }
  };
  try {
    for await (const chunk of body) {
      const buf = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
      total += buf.length;
      if (total > maxBytes) {
        body.destroy();
        throw new VesselError('invalid_argument', `file is larger than the limit of ${maxBytes} bytes`, { httpStatus: 413 });
      }
      pending.push(buf);
      pendingBytes += buf.length;
      if (pendingBytes >= FILE_CHUNK_BYTES) await flush();
    }
    await flush();
  } catch (err) {
    await (await agent()).call('guest-file-close', { handle }).catch(() => undefined);
    throw err;
  }
  const ga = await agent();
  try {
    await ga.call('guest-file-close', { handle });
  } catch (err) {
    throw mapFileError(err, path);
  }
  const synced = await runToExit(ga, '/bin/sync', ['--', ...fileAndAncestors(path)]);
  if (synced !== 0) throw new VesselError('failed_precondition', `'${path}' was written but could not be flushed to the runtime's disk`);
  return total;
}
