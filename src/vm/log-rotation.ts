/**
 * Caps the logs a VM can make grow: its serial console (a root guest writes to /dev/ttyS0 as fast
 * as it likes) and QEMU's own output. Both are opened for appending (the console with
 * `append=on`), so a log can be cut in place: its last part is kept beside it as `<name>.1`, then
 * it is truncated, and the writer carries on at its new end.
 */
import { closeSync, constants, fstatSync, lstatSync, openSync, readSync, statSync, truncateSync } from 'node:fs';
import { writeFileDurably } from '../platform/durable-files.js';

/** Past this a log is cut; what a boot or a crash prints fits many times over. */
export const LOG_MAX_BYTES = 1024 * 1024;
/** What is kept of a cut log, its most recent end. */
const KEPT_BYTES = 256 * 1024;

/**
 * The last `bytes` of a log (fewer if it is shorter) and the log's size, read without reading the
 * rest; null if it cannot be opened or is not a regular file. A link is not followed, and a FIFO
 * put in its place is not waited on.
 */
export function readLogTail(path: string, bytes: number): { tail: Buffer; size: number } | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  } catch {
    return null;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) return null;
    // The size of this moment: the writer only appends, so the bytes up to it stay as they are.
    const size = stat.size;
    const tail = Buffer.alloc(Math.min(bytes, size));
    let filled = 0;
    while (filled < tail.length) {
      const n = readSync(fd, tail, filled, tail.length - filled, size - tail.length + filled);
      if (n === 0) break;
      filled += n;
    }
    return { tail: tail.subarray(0, filled), size };
  } finally {
    closeSync(fd);
  }
}

/** The last `bytes` of a log (fewer if it is shorter); null if it cannot be opened. */
export const readLogEnd = (path: string, bytes: number): Buffer | null => readLogTail(path, bytes)?.tail ?? null;

/**
 * The last `bytes` a writer appended to `path` across its last cut: the log's own bytes, preceded
 * by the end of `<path>.1` when the log holds fewer. `truncated` when older output exists or
 * existed than these: the log holds more, or it was cut (a cut keeps only the end of what it cut).
 * Null when the log itself does not exist.
 *
 * Race-free against rotateLog, the only thing that cuts a log: both are synchronous and run in
 * the one service process, so a cut happens wholly before or wholly after this read, never
 * between its two files. The writer (QEMU) meanwhile only appends, and each file is read up to
 * the size its descriptor had when opened.
 */
export function readRotatedLogEnd(path: string, bytes: number): { bytes: Buffer; truncated: boolean } | null {
  const current = readLogTail(path, bytes);
  if (current === null) return null;
  const kept = `${path}.1`;
  const wanted = bytes - current.tail.length;
  const before = current.size === current.tail.length && wanted > 0 ? (readLogTail(kept, wanted)?.tail ?? Buffer.alloc(0)) : Buffer.alloc(0);
  const cut = lstatSync(kept, { throwIfNoEntry: false }) !== undefined;
  return { bytes: Buffer.concat([before, current.tail]), truncated: current.size > current.tail.length || cut };
}

/** Cuts `path` if it has grown past LOG_MAX_BYTES. Returns whether it did. */
export function rotateLog(path: string, maxBytes = LOG_MAX_BYTES): boolean {
  let size: number;
  try {
    size = statSync(path).size;
  } catch {
    return false;
  }
  if (size <= maxBytes) return false;
  const keep = readLogEnd(path, KEPT_BYTES);
  if (keep === null) return false;
  writeFileDurably(`${path}.1`, keep);
  truncateSync(path, 0);
  return true;
}
