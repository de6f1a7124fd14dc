/**
 * A FileTree written into a new ext4 image, the raw disk a template's chain stands on (as
 * rootfs.img does for the default image).
 *
 * `mkfs.ext4 -d` would need the tree as a directory on the host, which means root creating
 * paths, owners, setuid files and links that an image chose. Instead the image is made empty and
 * debugfs (e2fsprogs, which mkfs comes from) fills it from a script: every path it touches is a
 * path inside the image, and the only host files it reads are contents in the BlobStore, by
 * digest. debugfs resolves names relative to its current directory, so the script `cd`s into
 * each directory (by an absolute path made only of directories it created) and names children
 * plainly; every name is quoted, a `"` doubled, which is how its parser reads them.
 *
 * debugfs reports failures on stderr but exits 0, so any stderr line but its banner fails the
 * build, and `e2fsck -fn` checks the result.
 */
import { spawn } from 'node:child_process';
import { rmSync, writeFileSync } from 'node:fs';
import { VesselError } from '../core/errors.js';
import type { BlobStore } from './blob-store.js';
import type { FileTree, Inode, Kind } from './file-tree.js';

export interface Ext4Options {
  /** The file system's size: what the guest sees as its root disk (the file is sparse). */
  sizeBytes: number;
  /** The volume label; the default image's is vessel-root. */
  label?: string;
}

export interface Ext4Result {
  inodes: number;
  /** Bytes of file contents written (hard links once). */
  contentBytes: number;
}

export class Ext4Error extends Error {}

/** The contents do not fit the disk asked for: the user's to fix, with a larger disk or a smaller image. */
export class DiskTooSmallError extends VesselError {
  constructor(message: string) {
    super('invalid_argument', message);
  }
}

const TYPE_BITS: Record<Kind, number> = { file: 0o100000, dir: 0o040000, symlink: 0o120000, fifo: 0o010000 };
const BLOCK = 4096;

/** A name or path as debugfs's parser reads it back: in double quotes, a quote doubled. */
const q = (s: string): string => `"${s.replaceAll('"', '""')}"`;

export async function writeExt4(tree: FileTree, blobs: BlobStore, file: string, opts: Ext4Options): Promise<Ext4Result> {
  const inodes = new Map<Inode, { path: string; links: number }>();
  let contentBytes = 0;
  let blocksNeeded = 0;
  for (const [path, node] of tree.walk()) {
    const seen = inodes.get(node.inode);
    if (seen !== undefined) {
      seen.links++;
      continue;
    }
    inodes.set(node.inode, { path, links: 1 });
    if (node.inode.kind === 'file') contentBytes += node.inode.size;
    blocksNeeded += Math.ceil(node.inode.size / BLOCK) + 1;
  }
  // Room for the contents, an inode each, the journal and ext4's own metadata, with a margin.
  const inodeCount = Math.max(16384, Math.ceil(inodes.size * 1.25));
  const minimum = blocksNeeded * BLOCK * 1.1 + inodeCount * 256 + 64 * 1024 * 1024;
  if (opts.sizeBytes < minimum) throw new DiskTooSmallError(`the image needs about ${Math.ceil(minimum / 1048576)} MiB, more than the disk's ${Math.floor(opts.sizeBytes / 1048576)} MiB`);

  rmSync(file, { force: true });
  await run('mkfs.ext4', ['-q', '-F', '-b', String(BLOCK), '-N', String(inodeCount), '-L', opts.label ?? 'vessel-root', file, `${Math.floor(opts.sizeBytes / 1024)}k`]);

  const lines: string[] = [];
  const attrs = (target: string, i: Inode) => {
    lines.push(`sif ${q(target)} mode 0${(TYPE_BITS[i.kind] | i.mode).toString(8)}`, `sif ${q(target)} uid ${i.uid}`, `sif ${q(target)} gid ${i.gid}`, `sif ${q(target)} mtime @${i.mtime}`);
  };
  const written = new Set<Inode>();
  let cwd = '';
  for (const [path, node] of tree.walk()) {
    const i = node.inode;
    if (path === '') {
      attrs('/', i);
      continue;
    }
    const cut = path.lastIndexOf('/');
    const dir = path.slice(0, cut);
    const name = path.slice(cut + 1);
    if (dir !== cwd) {
      lines.push(`cd ${q(dir === '' ? '/' : dir)}`);
      cwd = dir;
    }
    if (written.has(i)) {
      lines.push(`ln ${q(inodes.get(i)!.path)} ${q(name)}`);
      continue;
    }
    written.add(i);
    // mkfs made /lost+found already; an image's own (debootstrap's rootfs has one) takes its place.
    if (path === '/lost+found') lines.push(`rmdir ${q(name)}`);
    if (i.kind === 'dir') lines.push(`mkdir ${q(name)}`);
    else if (i.kind === 'file') lines.push(`write ${q(blobs.path(i.digest!))} ${q(name)}`);
    else if (i.kind === 'symlink') lines.push(`symlink ${q(name)} ${q(i.target!)}`);
    else lines.push(`mknod ${q(name)} p`);
    attrs(name, i);
  }
  // debugfs's ln adds a name, not a link count.
  for (const { path, links } of inodes.values()) if (links > 1) lines.push(`sif ${q(path)} links_count ${links}`);

  const script = `${file}.debugfs`;
  writeFileSync(script, `${lines.join('\n')}\n`, { mode: 0o600 });
  try {
    const stderr = await run('debugfs', ['-w', '-f', script, file]);
    const problems = stderr.split('\n').filter((l) => l.trim() !== '' && !/^debugfs \d/.test(l));
    if (problems.length > 0) throw new Ext4Error(`debugfs: ${problems.slice(0, 5).join('; ')}`);
  } finally {
    rmSync(script, { force: true });
  }
  await run('e2fsck', ['-fn', file]);
  return { inodes: inodes.size, contentBytes };
}

/** Runs a tool; resolves with its stderr (stdout, debugfs's echo of every command, is dropped). */
function run(cmd: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-64 * 1024);
    });
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(stderr) : reject(new Ext4Error(`${cmd} failed (${code}): ${stderr.trim().slice(-2000)}`))));
  });
}
