/**
 * What a COPY (or ADD of local files) sends into a build VM: a tar stream of the matched context
 * nodes, made here from the FileTree and the BlobStore, with `--chown` and `--chmod` applied in
 * its headers. The guest's tar extracts it as root, keeping the owners the headers give; so the
 * stream is the whole of what a COPY does, and the host writes nothing under any of its names.
 *
 * Docker's rules for where things land: a directory's contents (not the directory itself) go
 * into the destination; a file goes to the destination path, or under it when the destination is
 * a directory (a trailing `/`, or several sources).
 */
import { createReadStream } from 'node:fs';
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { Header, Pax } from 'tar';
import type { BlobStore } from './blob-store.js';
import type { TreeNode } from './file-tree.js';
import type { MatchedSource } from './step-keys.js';

/** One tar stream to extract in `dir` of the guest. */
export interface CopyArchive {
  dir: string;
  entries: CopyEntry[];
}

interface CopyEntry {
  /** Relative to the archive's directory. */
  path: string;
  node: TreeNode;
}

export interface CopyOwnership {
  uid: number;
  gid: number;
}

/** ADD extracts local archives; that needs the archive's tar parsed in the guest, and is not built yet. */
const ARCHIVE_NAME = /\.(tar|tar\.gz|tgz|tar\.bz2|tbz2?|tar\.xz|txz|tar\.zst)$/i;

export class CopyError extends Error {}

/**
 * The archives of one COPY step, one per destination directory. `sources` are the step's
 * sources as step-keys.ts matched them (one list per source word).
 */
export function copyArchives(sources: MatchedSource[][], dest: string, destIsDir: boolean, extractArchives: boolean): CopyArchive[] {
  const matched = sources.flat();
  const intoDir = destIsDir || matched.length > 1;
  const archives = new Map<string, CopyEntry[]>();
  const add = (dir: string, entry: CopyEntry) => {
    const list = archives.get(dir) ?? [];
    list.push(entry);
    archives.set(dir, list);
  };
  for (const m of matched) {
    if (extractArchives && m.node.children === null && ARCHIVE_NAME.test(m.path)) {
      throw new CopyError(`ADD ${m.path}: extracting a local archive is not supported yet; COPY it and RUN tar -xf`);
    }
    if (m.node.children !== null) {
      for (const [name, child] of m.node.children) add(dest, { path: name, node: child });
    } else if (intoDir) add(dest, { path: posix.basename(m.path), node: m.node });
    else add(posix.dirname(dest), { path: posix.basename(dest), node: m.node });
  }
  return [...archives].map(([dir, entries]) => ({ dir, entries }));
}

/** The tar stream of an archive: every node under its entries, parents first, owners and modes applied. */
export function copyTar(archive: CopyArchive, blobs: BlobStore, chown: CopyOwnership | null, chmod: number | null): Readable {
  return Readable.from(tarChunks(archive, blobs, chown, chmod), { objectMode: false });
}

async function* tarChunks(archive: CopyArchive, blobs: BlobStore, chown: CopyOwnership | null, chmod: number | null): AsyncGenerator<Buffer> {
  for (const entry of archive.entries) {
    const stack: [string, TreeNode][] = [[entry.path, entry.node]];
    for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
      const [path, node] = item;
      const i = node.inode;
      const size = i.kind === 'file' ? i.size : 0;
      yield* header(path, node, chown, chmod);
      if (i.kind === 'file' && size > 0) {
        for await (const chunk of createReadStream(blobs.path(i.digest!))) yield chunk as Buffer;
        const pad = (512 - (size % 512)) % 512;
        if (pad > 0) yield Buffer.alloc(pad);
      }
      if (node.children !== null) {
        for (const name of [...node.children.keys()].sort().reverse()) stack.push([`${path}/${name}`, node.children.get(name)!]);
      }
    }
  }
  yield Buffer.alloc(1024);
}

function* header(path: string, node: TreeNode, chown: CopyOwnership | null, chmod: number | null): Generator<Buffer> {
  const i = node.inode;
  const type = i.kind === 'dir' ? 'Directory' : i.kind === 'symlink' ? 'SymbolicLink' : 'File';
  const name = i.kind === 'dir' ? `${path}/` : path;
  const fields = {
    path: name,
    // A COPY's files are root's unless --chown says otherwise, whatever the context's tar held (Docker's rule).
    uid: chown?.uid ?? 0,
    gid: chown?.gid ?? 0,
    uname: '',
    gname: '',
    mode: i.kind === 'symlink' ? 0o777 : (chmod ?? i.mode) & 0o7777,
    size: i.kind === 'file' ? i.size : 0,
    mtime: new Date(i.mtime * 1000),
    type,
    ...(i.kind === 'symlink' ? { linkpath: i.target! } : {}),
  } as const;
  const h = new Header(fields);
  const block = Buffer.alloc(512);
  h.encode(block, 0);
  if (h.needPax) yield new Pax({ path: name, ...(i.kind === 'symlink' ? { linkpath: i.target! } : {}) }).encode();
  yield block;
}
