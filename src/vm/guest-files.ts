/**
 * Files through vessel-agent: raw bytes streamed both ways under the agent's flow control
 * (docs/agent-protocol.md, "Files"), so a file is never held whole in memory on the host.
 * A write is durable when the agent answers it: the file is fsync'd and closed, then every
 * directory above it is fsync'd, in the guest, before the END.
 */
import type { Readable } from 'node:stream';
import { VesselError, invalidArgument, notFound } from '../core/errors.js';
import { AgentError, type AgentClient } from './agent/agent-client.js';

type Agent = () => Promise<AgentClient>;

/** Linux errnos the agent reports (its ERROR carries the guest's errno). */
const E = { ENOENT: 2, EIO: 5, EACCES: 13, ENOTDIR: 20, EISDIR: 21, EINVAL: 22, ENOSPC: 28, EROFS: 30, ENAMETOOLONG: 36, EDQUOT: 122 } as const;

function mapFileError(err: unknown, path: string): unknown {
  // A path the agent's frame cannot carry (over 4095 bytes once in UTF-8).
  if (err instanceof RangeError) return invalidArgument(`path '${path.slice(0, 64)}…' is too long for the guest`);
  if (!(err instanceof AgentError) || err.kind !== 'ERRNO') return err;
  switch (err.errno) {
    case E.ENOENT:
      return notFound('file', path);
    case E.EISDIR:
      return invalidArgument(`'${path}' is a directory, not a regular file`);
    case E.ENOTDIR:
      return invalidArgument(`a parent of '${path}' is not a directory`);
    case E.EINVAL:
      return invalidArgument(`'${path}' is not a regular file`);
    case E.ENAMETOOLONG:
      return invalidArgument(`'${path}' has a name too long for the guest's file system`);
    case E.EACCES:
    case E.EROFS:
      return new VesselError('failed_precondition', `'${path}' cannot be accessed: ${err.detail}`);
    case E.ENOSPC:
    case E.EDQUOT:
      return new VesselError('failed_precondition', `the runtime's disk is full`);
    case E.EIO:
      return new VesselError('failed_precondition', `'${path}' could not be written to the runtime's disk: ${err.detail}`);
    default:
      return err;
  }
}

/**
 * Resolves once the agent has opened the file (its STAT comes before any byte), so that a missing
 * file or a directory is an error status rather than a broken 200 stream.
 */
export async function readGuestFile(agent: Agent, path: string): Promise<Readable> {
  try {
    return (await (await agent()).readFile(path)).stream;
  } catch (err) {
    throw mapFileError(err, path);
  }
}

/** The body, cut off with 413 at `maxBytes`. */
async function* capped(body: Readable, maxBytes: number): AsyncGenerator<Uint8Array> {
  let total = 0;
  for await (const chunk of body) {
    const buf: Buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    total += buf.length;
    if (total > maxBytes) {
      body.destroy();
      throw new VesselError('invalid_argument', `file is larger than the limit of ${maxBytes} bytes`, { httpStatus: 413 });
    }
    yield buf;
  }
}

/**
 * Writes the file, missing parents created (0755), and answers once the agent has made it
 * durable: found, whole, after the VM crashes (the host honours the guest's flushes: the
 * overlay's cache mode is writeback with flushes). An aborted write leaves a partial file that
 * was never acknowledged, as before.
 */
export async function writeGuestFile(agent: Agent, path: string, body: Readable, maxBytes: number): Promise<number> {
  try {
    return await (await agent()).writeFile(path, capped(body, maxBytes), { mkdirs: true });
  } catch (err) {
    throw mapFileError(err, path);
  }
}
