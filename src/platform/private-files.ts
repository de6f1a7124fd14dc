/**
 * Reading a file that holds a secret (the bootstrap admin token, the master key, the CA key):
 * only from a regular file of the service's own user that no one else may read or write. A
 * group- or world-readable key has leaked to every local user, and a file someone else owns or
 * can write, or a link someone else could point elsewhere, may have been put there to be
 * trusted. Such a file is refused with the fix in the message rather than used.
 */
import { closeSync, constants, fstatSync, openSync, readFileSync } from 'node:fs';

export function readPrivateFile(path: string): string {
  let fd: number;
  try {
    // O_NOFOLLOW: the check and the read are of the same file, with no link in between.
    fd = openSync(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') {
      throw new Error(`${path} is a symbolic link; a private file must be the file itself. Replace the link with the file it points to`);
    }
    throw err;
  }
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile()) throw new Error(`${path} is not a regular file`);
    const uid = process.getuid?.();
    if (uid !== undefined && stat.uid !== uid) {
      throw new Error(`${path} is owned by uid ${stat.uid}, not by this service's user (uid ${uid}). Run: chown ${uid} ${path}`);
    }
    if ((stat.mode & 0o077) !== 0) {
      const mode = `0${(stat.mode & 0o777).toString(8)}`;
      throw new Error(`${path} has mode ${mode}: users other than its owner can use it. Run: chmod 600 ${path}`);
    }
    return readFileSync(fd, 'utf8');
  } finally {
    closeSync(fd);
  }
}
