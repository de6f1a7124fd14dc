/**
 * Writes that survive a crash of the service or of the host. A file is written under a temporary
 * name, flushed to disk, renamed over its final name, and the directory is flushed too, so that
 * after a power cut the name holds either the old content or the new one, whole: never nothing,
 * never half. (A rename alone is atomic for processes, not for the disk.)
 */
import { closeSync, constants, fsyncSync, linkSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';

/** Flushes a directory's entries (names created, renamed or removed in it). */
export const fsyncDir = (dir: string): void => fsyncOpened(dir, constants.O_RDONLY | constants.O_DIRECTORY);

/** Flushes a file's data and metadata. */
export const fsyncFile = (path: string): void => fsyncOpened(path, constants.O_RDONLY | constants.O_NOFOLLOW);

function fsyncOpened(path: string, flags: number): void {
  const fd = openSync(path, flags);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Flushes large files off the event loop, all at once: the flushes run on libuv's threads, so a
 * checkpoint's hundreds of MiB reaching the disk does not stall the API for every other tenant.
 */
export async function flushFiles(paths: string[]): Promise<void> {
  await Promise.all(
    paths.map(async (path) => {
      const handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        await handle.sync();
      } finally {
        await handle.close();
      }
    }),
  );
}

/**
 * Replaces `path` with `data`, durably and atomically. The temporary file is made with O_EXCL
 * and O_NOFOLLOW, so a name planted beside it is never written through.
 */
export function writeFileDurably(path: string, data: string | Buffer, mode = 0o600): void {
  const tmp = writeTemporary(path, data, mode);
  renameSync(tmp, path);
  fsyncDir(dirname(path));
}

/**
 * Creates `path` with `data`, durably, and only if no file of that name exists (EEXIST
 * otherwise): the name appears with the whole content or not at all.
 */
export function createFileDurably(path: string, data: string | Buffer, mode = 0o600): void {
  const tmp = writeTemporary(path, data, mode);
  try {
    linkSync(tmp, path);
  } finally {
    rmSync(tmp, { force: true });
  }
  fsyncDir(dirname(path));
}

/** `data` in a new, flushed file beside `path`; returns its name. */
function writeTemporary(path: string, data: string | Buffer, mode: number): string {
  const tmp = join(dirname(path), `.${basename(path)}.${process.pid}.tmp`);
  rmSync(tmp, { force: true });
  const fd = openSync(tmp, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, mode);
  try {
    const bytes = typeof data === 'string' ? Buffer.from(data) : data;
    for (let at = 0; at < bytes.length; ) at += writeSync(fd, bytes, at, bytes.length - at);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(tmp, { force: true });
    throw err;
  }
  closeSync(fd);
  return tmp;
}
