/**
 * Local directories as tar streams, for Files.upload() and Files.download() on Node. Loaded by
 * client/files.ts only on Node, so the rest of the SDK stays free of Node's modules. node-tar
 * (npm's own) does the format and its hazards: entries that climb out of the target directory
 * (`..`, absolute paths, through symbolic links) are refused when unpacking.
 */
import { mkdir, stat } from 'node:fs/promises';
import { Readable } from 'node:stream';
import type { ReadableStream as NodeReadableStream } from 'node:stream/web';
import { create, Unpack } from 'tar';
import type { LocalDirectories } from '../files.js';

export const localDirectories: LocalDirectories = {
  async pack(localDir) {
    // Here, not midway through the upload, where it would look like a failed connection.
    if (!(await stat(localDir)).isDirectory()) throw new Error(`'${localDir}' is not a directory`);
    // portable: no owner names or ids of this machine, no atime or ctime: the guest's tar, running
    // as root, then makes the files root's.
    return create({ cwd: localDir, portable: true }, ['.']);
  },

  async extract(archive, localDir, signal) {
    await mkdir(localDir, { recursive: true });
    // strict: an entry node-tar would only warn about (a bad header, a path it will not write) fails the download.
    const unpack = new Unpack({ cwd: localDir, strict: true });
    const done = new Promise<void>((resolve, reject) => {
      unpack.on('close', resolve);
      unpack.on('error', reject);
    });
    const source = Readable.fromWeb(archive as NodeReadableStream<Uint8Array>, signal === undefined ? {} : { signal });
    // A transfer broken midway (the guest's tar failed, the signal aborted) must not pass for a short archive.
    source.on('error', (err) => unpack.abort(err));
    source.pipe(unpack);
    await done;
  },
};
