/**
 * Directories through vessel-agent. A listing, a stat, mkdir -p and a removal are one agent
 * request each (docs/agent-protocol.md, "Files"). Archives are GNU tar run in the guest ("Tar:
 * proposed through exec"): one spawn streams a whole tree, flow-controlled both ways, where a
 * walk from the host would cost a round trip per file, and tar's own exit status and stderr say
 * what went wrong. The archive is never whole in memory on the host.
 */
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { VesselError, failedPrecondition, invalidArgument } from '../core/errors.js';
import type { GuestFileInfo, GuestFileStat } from '../core/types.js';
import { AgentError, AgentReplyTooLargeError, guestDate, type AgentClient, type AgentProcess, type OutputChunk, type ProcessInfo } from './agent/agent-client.js';
import { agentFailure, diskFull, guestPathError } from './guest-errors.js';
import { GUEST_BASE_ENV } from './guest-exec.js';
import { capped } from './guest-files.js';

type Agent = () => Promise<AgentClient>;

/** Entries one listing answers with; a larger directory is refused rather than cut short. */
export const MAX_LISTED_ENTRIES = 100_000;
/**
 * Bytes one listing may hold: per entry 24, its name and its path's prefix (what the answer
 * repeats in each `path`). An honest directory of 100,000 entries fits with names and prefix of
 * 143 bytes on average; names full of bytes JSON escapes cost up to six times theirs in the answer.
 */
export const MAX_LISTING_BYTES = 16 * 1024 * 1024;
/** A recursive removal runs inside the agent's loop and may take long on a large tree under TCG. */
const REMOVE_TIMEOUT_MS = 10 * 60_000;
/** What is kept of tar's stderr for an error message: its first complaints are the telling ones. */
const STDERR_KEPT = 2048;
/** LC_ALL=C: tar's messages in plain English, which the disk-full check below reads. */
const TAR_ENV = [`PATH=${GUEST_BASE_ENV.PATH}`, 'LC_ALL=C'];
const DISK_FULL = /No space left on device|Disk quota exceeded/;

interface Described {
  type: GuestFileInfo['type'];
  mode: number;
  size: bigint;
  mtimeNs: bigint;
}

function info(name: string, path: string, d: Described): GuestFileInfo {
  return { name, path, type: d.type, size_bytes: Number(d.size), mode: d.mode, modified_at: guestDate(d.mtimeNs).toISOString() };
}

/** Sorted by name (UTF-16 code units), so that a listing reads the same every time. */
export async function listGuestDir(agent: Agent, path: string): Promise<GuestFileInfo[]> {
  const prefix = path.endsWith('/') ? path : `${path}/`;
  try {
    const entries = await (await agent()).listDir(path, { maxEntries: MAX_LISTED_ENTRIES, maxBytes: MAX_LISTING_BYTES, entryBytes: Buffer.byteLength(prefix) });
    return entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0)).map((e) => info(e.name, prefix + e.name, e));
  } catch (err) {
    // A huge directory is honest too: the caller's to list another way, not the runtime's fault.
    if (err instanceof AgentReplyTooLargeError) {
      const over = err.unit === 'entries' ? `has more than ${err.limit} entries` : `is too large to list (over ${err.limit} bytes of names and paths)`;
      throw failedPrecondition(`directory '${path}' ${over}; download it as an archive or list it with exec`);
    }
    throw guestPathError(err, path, 'directory');
  }
}

export async function statGuestPath(agent: Agent, path: string, followSymlinks: boolean): Promise<GuestFileStat> {
  try {
    const st = await (await agent()).stat(path, { noFollow: !followSymlinks });
    return { ...info(posix.basename(path) || '/', path, st), uid: st.uid, gid: st.gid };
  } catch (err) {
    throw guestPathError(err, path, 'path');
  }
}

export async function makeGuestDir(agent: Agent, path: string): Promise<void> {
  try {
    await (await agent()).mkdir(path, { parents: true });
  } catch (err) {
    throw guestPathError(err, path, 'directory');
  }
}

export async function removeGuestPath(agent: Agent, path: string, recursive: boolean): Promise<void> {
  try {
    await (await agent()).remove(path, { recursive, ...(recursive ? { timeoutMs: REMOVE_TIMEOUT_MS } : {}) });
  } catch (err) {
    throw guestPathError(err, path, 'path');
  }
}

/** The head of a process's stderr, as text. */
class StderrHead {
  readonly #parts: Buffer[] = [];
  #bytes = 0;
  push(data: Buffer): void {
    if (this.#bytes >= STDERR_KEPT) return;
    const part = data.subarray(0, STDERR_KEPT - this.#bytes);
    this.#parts.push(part);
    this.#bytes += part.length;
  }
  toString(): string {
    return Buffer.concat(this.#parts).toString('utf8').trim() || 'no message';
  }
}

const exitText = (p: ProcessInfo | null): string =>
  p === null ? 'its stream ended' : p.state === 'signaled' ? `killed by signal ${p.code}` : `exit status ${p.code}`;

const succeeded = (p: ProcessInfo | null): boolean => p?.state === 'exited' && p.code === 0;

/** A tar that could not even start is the image's fault, not the caller's. */
function spawnError(err: unknown): unknown {
  if (err instanceof AgentError && (err.kind === 'EXEC' || err.kind === 'CWD')) return failedPrecondition(`tar could not be started in the runtime: ${err.detail}`);
  return agentFailure(err);
}

/** Stops tar for good: without it, a cancelled stream would let it run on into its ring. */
function abandon(ga: AgentClient, proc: AgentProcess): void {
  void proc.info.then((p) => ga.signal(p.id, 'SIGKILL', { tree: true })).catch(() => undefined);
  proc.cancel();
}

/**
 * `tar -cf -` of the directory's contents (`.`), not crossing into other file systems, so that
 * an archive of `/` leaves /proc, /sys and /dev out. Resolves with the archive once tar has
 * produced its first bytes: a missing path or a non-directory, and a tar that fails before
 * writing anything, are errors the caller can still answer with a status. A failure after that
 * (a non-zero exit, a lost channel) destroys the stream with an error, so an HTTP client sees a
 * broken transfer, never a short archive that looks whole. Destroying the stream kills tar.
 */
export async function readGuestArchive(agent: Agent, dir: string): Promise<Readable> {
  const ga = await agent();
  try {
    if ((await ga.stat(dir)).type !== 'directory') throw invalidArgument(`'${dir}' is not a directory`);
  } catch (err) {
    throw guestPathError(err, dir, 'directory');
  }
  const proc = ga.spawn({ argv: ['tar', '--one-file-system', '-C', dir, '-cf', '-', '.'], env: TAR_ENV, hold: true, forgetOnExit: true });
  const output = proc[Symbol.asyncIterator]();
  const stderr = new StderrHead();
  let first: Buffer | null = null;
  try {
    while (first === null) {
      const r = await output.next();
      if (r.done) break;
      if (r.value.channel === 'stdout') first = r.value.data;
      else stderr.push(r.value.data);
    }
  } catch (err) {
    abandon(ga, proc);
    throw spawnError(err);
  }
  if (first === null) throw failedPrecondition(`tar could not archive '${dir}' (${exitText(await proc.done)}): ${String(stderr)}`);
  const tar = { ended: false };
  // One chunk ahead at most: the agent stream's window is the buffer that matters.
  const archive = Readable.from(archiveRest(tar, proc, output, first, stderr, dir), { highWaterMark: 1 });
  // The consumer went away (or the channel did), even before the first read: tar must not go
  // on reading the whole tree, nor wait on its output for good.
  archive.once('close', () => {
    if (!tar.ended) abandon(ga, proc);
  });
  return archive;
}

async function* archiveRest(tar: { ended: boolean }, proc: AgentProcess, output: AsyncIterator<OutputChunk>, first: Buffer, stderr: StderrHead, dir: string): AsyncGenerator<Buffer> {
  yield first;
  for (;;) {
    const r = await output.next();
    if (r.done) break;
    if (r.value.channel === 'stdout') yield r.value.data;
    else stderr.push(r.value.data);
  }
  tar.ended = true;
  const exit = await proc.done;
  if (!succeeded(exit)) throw failedPrecondition(`tar failed while archiving '${dir}' (${exitText(exit)}): ${String(stderr)}`);
}

/**
 * Makes the directory (mkdir -p) and runs `tar -xf -` in it with the body as its stdin, sent
 * within the agent's credit: the body is read only as fast as tar takes it. Tar keeps owners
 * and modes from the archive, as it does for root and as `docker cp` does. Resolves with the
 * bytes sent. A tar that fails (not an archive, cut short, disk full) is `invalid_argument`
 * with its own message (the disk: `failed_precondition`). What tar extracted before a failure
 * stays, as it would with tar itself.
 */
export async function writeGuestArchive(agent: Agent, dir: string, body: Readable, maxBytes: number): Promise<number> {
  const ga = await agent();
  await makeGuestDir(agent, dir);
  const proc = ga.spawn({ argv: ['tar', '-C', dir, '-xf', '-'], env: TAR_ENV, stdin: true, hold: true, forgetOnExit: true });
  const stderr = new StderrHead();
  // Read while stdin is fed: tar may complain, and stop, before it has taken the whole body.
  const exited = (async () => {
    for await (const chunk of proc) if (chunk.channel === 'stderr') stderr.push(chunk.data);
    return proc.done;
  })();
  exited.catch(() => undefined);
  let bytes = 0;
  try {
    for await (const chunk of capped(body, maxBytes, 'archive')) {
      try {
        await proc.write(chunk);
      } catch {
        break; // tar is gone (or never started): its exit, below, says why
      }
      bytes += chunk.length;
    }
    proc.end();
  } catch (err) {
    // The body failed: over the limit, or the client went away. Tar must not wait for the rest.
    abandon(ga, proc);
    throw err;
  }
  let exit: ProcessInfo | null;
  try {
    exit = await exited;
  } catch (err) {
    throw spawnError(err);
  }
  if (!succeeded(exit)) {
    const message = stderr.toString();
    if (DISK_FULL.test(message)) throw diskFull();
    throw new VesselError('invalid_argument', `tar could not extract the archive into '${dir}' (${exitText(exit)}): ${message}`);
  }
  return bytes;
}
