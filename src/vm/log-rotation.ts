/**
 * Caps the logs a VM can make grow: its serial console (a root guest writes to /dev/ttyS0 as fast
 * as it likes) and QEMU's own output. Both are opened for appending (the console with
 * `append=on`), so a log can be cut in place: its last part is kept beside it as `<name>.1`, then
 * it is truncated, and the writer carries on at its new end.
 */
import { closeSync, constants, fstatSync, openSync, readSync, statSync, truncateSync } from 'node:fs';
import { writeFileDurably } from '../platform/durable-files.js';

/** Past this a log is cut; what a boot or a crash prints fits many times over. */
export const LOG_MAX_BYTES = 1024 * 1024;
/** What is kept of a cut log, its most recent end. */
const KEPT_BYTES = 256 * 1024;

/**
 * The last `bytes` of a log (fewer if it is shorter), read without reading the rest; null if it
 * cannot be opened. A link is not followed.
 */
export function readLogEnd(path: string, bytes: number): Buffer | null {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch {
    return null;
  }
  try {
    const size = fstatSync(fd).size;
    const end = Buffer.alloc(Math.min(bytes, size));
    const n = readSync(fd, end, 0, end.length, size - end.length);
    return end.subarray(0, n);
  } finally {
    closeSync(fd);
  }
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
