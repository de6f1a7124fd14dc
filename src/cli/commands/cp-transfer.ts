/**
 * What `vessel cp SRC DST` does (cp.ts declares it; this is loaded only when it runs, with tar and
 * the progress bar): a file or a directory, into or out of a runtime, written `RUNTIME:/path`
 * on the runtime's side, with docker cp's rules: a file copied onto a directory goes inside it;
 * a directory copied to a path that does not exist becomes it, and onto a directory goes inside
 * it, unless the source ends in `/.` (then its contents go). `-` is stdin or stdout: a file's
 * bytes, or a remote directory as a tar stream. Directories travel as tar archives through the
 * SDK; a bar shows long transfers on a terminal.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { readdir, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, posix } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { VesselError, type FileStat, type Runtime } from 'vessel/client';
// Not exported by vessel/client: the SDK's own tar packing and unpacking of a local directory,
// used here so that the archive's bytes can be counted for the bar (upload() and download()
// take no progress callback).
import { localDirectories } from '../../../client/node/directories.js';
import { counted, NO_PROGRESS, transferProgress, type TransferProgress } from '../progress.js';
import type { Context } from '../shared/client.js';
import { CliError, EXIT, UsageError } from '../shared/exit-codes.js';
import { printJson } from '../shared/output.js';
import { writeTo } from '../shared/stdio.js';

type Location = { runtime: string; path: string } | { local: string };

/** A runtime's display name or id, a colon, an absolute path. `./a:b` is a local file. */
const REMOTE = /^([A-Za-z0-9][A-Za-z0-9._-]{0,127}):(.*)$/;

export function parseLocation(arg: string): Location {
  const match = REMOTE.exec(arg);
  if (match === null) return { local: arg };
  const [, runtime, path] = match as unknown as [string, string, string];
  if (!path.startsWith('/')) throw new UsageError(`'${arg}': the path in a runtime must be absolute (write ./${arg} for a local file)`);
  return { runtime, path };
}

interface Copied {
  /** Where it went: the path written, `RUNTIME:/path` in a runtime, `-` for stdout. */
  target: string;
  type: 'file' | 'directory';
  /** What travelled: the file's bytes, or the directory's tar archive. */
  bytes: number;
}

/** A directory's name that stands for its contents (`dir/.`, `/`): those go into the target itself. */
const isContents = (name: string): boolean => name === '.' || name === '';

async function remoteStat(rt: Runtime, path: string): Promise<FileStat | null> {
  try {
    return await rt.files.stat(path);
  } catch (err) {
    if (err instanceof VesselError && err.code === 'not_found') return null;
    throw err;
  }
}

async function localStat(path: string) {
  try {
    return await stat(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** What a directory's tar archive will weigh: a 512-byte header an entry, contents in 512-byte blocks, two closing blocks. */
async function archiveSize(dir: string): Promise<number> {
  let bytes = 1024;
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    bytes += 512;
    if (entry.isFile()) bytes += Math.ceil((await stat(join(entry.parentPath, entry.name))).size / 512) * 512;
  }
  return bytes;
}

const notDirectory = (where: string) => new CliError(`${where} exists and is not a directory`, EXIT.conflict);

/** Counts what passes, for the bar and for the total reported. */
function meter(progress: TransferProgress): { transform: Transform; bytes: () => number } {
  let bytes = 0;
  const transform = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      bytes += chunk.length;
      progress.add(chunk.length);
      callback(null, chunk);
    },
  });
  return { transform, bytes: () => bytes };
}

type Bar = (label: string, total: number | undefined) => TransferProgress;

async function upload(rt: Runtime, local: string, remote: string, bar: Bar): Promise<Copied> {
  if (local === '-') {
    if (remote.endsWith('/')) throw new UsageError('stdin has no name: give the whole path of the file to write');
    const progress = bar('stdin', undefined);
    const written = await rt.files.write(remote, counted(process.stdin, progress));
    progress.finish();
    return { target: remote, type: 'file', bytes: written.size_bytes };
  }
  const info = await stat(local);
  if (info.isFile()) {
    const onto = remote.endsWith('/') || (await remoteStat(rt, remote))?.type === 'directory';
    const target = onto ? posix.join(remote, basename(local)) : remote;
    const progress = bar(basename(local), info.size);
    const written = await rt.files.write(target, counted(createReadStream(local), progress));
    progress.finish();
    return { target, type: 'file', bytes: written.size_bytes };
  }
  if (!info.isDirectory()) throw new CliError(`${local} is not a regular file or a directory`);
  const existing = await remoteStat(rt, remote);
  if (existing !== null && existing.type !== 'directory') throw notDirectory(remote);
  const name = basename(local);
  const target = existing === null || isContents(name) ? remote : posix.join(remote, name);
  const progress = bar(`${name}/`, bar === noBar ? undefined : await archiveSize(local));
  const written = await rt.files.uploadArchive(target, counted(await localDirectories.pack(local), progress));
  progress.finish();
  return { target, type: 'directory', bytes: written.size_bytes };
}

async function download(rt: Runtime, remote: string, local: string, bar: Bar): Promise<Copied> {
  const info = await rt.files.stat(remote);
  const name = posix.basename(remote);
  if (info.type !== 'file' && info.type !== 'directory') throw new CliError(`${remote} is a ${info.type}, not a regular file or a directory`);
  const progress = bar(name || '/', info.type === 'file' ? info.size_bytes : undefined);
  const counter = meter(progress);
  const source = Readable.fromWeb((await (info.type === 'file' ? rt.files.read(remote) : rt.files.downloadArchive(remote))) as NodeReadableStream<Uint8Array>).pipe(
    counter.transform,
  );
  let target = '-';
  if (local === '-') {
    for await (const chunk of source) await writeTo(process.stdout, chunk as Buffer);
  } else if (info.type === 'directory') {
    const existing = await localStat(local);
    if (existing !== null && !existing.isDirectory()) throw notDirectory(local);
    target = existing === null || isContents(name) ? local : join(local, name);
    await localDirectories.extract(Readable.toWeb(source) as ReadableStream<Uint8Array>, target, undefined);
  } else {
    const onto = local.endsWith('/') || (await localStat(local))?.isDirectory() === true;
    target = onto ? join(local, name) : local;
    // Written beside the target and renamed at the end: a broken transfer leaves no half file under the name.
    const temp = join(dirname(target), `.${basename(target)}.vessel-${process.pid}`);
    try {
      await pipeline(source, createWriteStream(temp, { flags: 'wx' }));
      await rename(temp, target);
    } catch (err) {
      await rm(temp, { force: true });
      throw err;
    }
  }
  progress.finish();
  return { target, type: info.type, bytes: counter.bytes() };
}

const noBar: Bar = () => NO_PROGRESS;

/** The command's work: `flags.progress` false is --no-progress. */
export async function copy(ctx: Context, sourceArg: string, destinationArg: string, flags: { progress: boolean }): Promise<void> {
  const [source, destination] = [parseLocation(sourceArg), parseLocation(destinationArg)];
  if (ctx.json && destinationArg === '-') throw new UsageError('--json and - both write to stdout: choose one');
  const bar: Bar = flags.progress ? transferProgress : noBar;
  let copied: Copied;
  if ('local' in source && 'runtime' in destination) {
    const rt = await ctx.vessel.runtimes.get(destination.runtime);
    copied = await upload(rt, source.local, destination.path, bar);
    copied.target = `${destination.runtime}:${copied.target}`;
  } else if ('runtime' in source && 'local' in destination) {
    const rt = await ctx.vessel.runtimes.get(source.runtime);
    copied = await download(rt, source.path, destination.local, bar);
  } else {
    throw new UsageError('one side must be in a runtime (RUNTIME:/path) and the other local');
  }
  if (ctx.json) printJson({ source: sourceArg, destination: copied.target, type: copied.type, bytes: copied.bytes });
}
