/**
 * Files through vessel-agent: raw bytes streamed both ways under the agent's flow control
 * (docs/agent-protocol.md, "Files"), so a file is never held whole in memory on the host.
 * A write is durable when the agent answers it: the file is fsync'd and closed, then every
 * directory above it is fsync'd, in the guest, before the END.
 */
import type { Readable } from 'node:stream';
import { VesselError } from '../core/errors.js';
import type { AgentClient } from './agent/agent-client.js';
import { guestPathError } from './guest-errors.js';

type Agent = () => Promise<AgentClient>;

const mapFileError = (err: unknown, path: string): unknown => guestPathError(err, path, 'file');

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

/** The body, cut off with 413 at `maxBytes`; `what` names it in the error. */
export async function* capped(body: Readable, maxBytes: number, what = 'file'): AsyncGenerator<Buffer> {
  let total = 0;
  for await (const chunk of body) {
    const buf: Buffer = Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as string);
    total += buf.length;
    if (total > maxBytes) {
      body.destroy();
      throw new VesselError('invalid_argument', `${what} is larger than the limit of ${maxBytes} bytes`, { httpStatus: 413 });
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
