/**
 * Image layers applied onto a FileTree, as the OCI image spec's "Applying Changesets" says:
 * entries in order, a later one replacing an earlier one of the same path (a directory over a
 * directory keeps its contents), `.wh.<name>` removing `<name>` from the layers below, and
 * `.wh..wh..opq` emptying its directory of what the layers below put there.
 *
 * The entries are hostile input. Paths go through `pathParts` and the tree (no `..`, never
 * through a symbolic link, ext4's limits); hard links must name a file already in the tree.
 * Device nodes are dropped, counted, never created: the guest mounts a devtmpfs on /dev, so an
 * image has no use for them (rootfs tarballs from debootstrap carry /dev/console and friends,
 * which is why they are not an error). Setuid bits and owners are kept, as Docker keeps them:
 * they only mean something inside the guest.
 */
import type { Readable } from 'node:stream';
import type { BlobStore } from './blob-store.js';
import { FileTree, pathParts, type Inode } from './file-tree.js';
import { tarEntries } from './tar-entries.js';

export const WHITEOUT_PREFIX = '.wh.';
export const OPAQUE_WHITEOUT = '.wh..wh..opq';

export class LayerError extends Error {}

export interface LayerLimits {
  /** The files' bytes summed over the whole image, hard links counted once. */
  maxBytes: number;
  /** Entries over the whole image. */
  maxEntries: number;
}

export const DEFAULT_LAYER_LIMITS: LayerLimits = { maxBytes: 8 * 1024 * 1024 * 1024, maxEntries: 1_000_000 };

const FILE_TYPES = new Set(['File', 'OldFile', 'ContiguousFile']);

/** Counts across the layers of one image. */
export class LayerBudget {
  bytes = 0;
  entries = 0;
  /** Device nodes left out, and the first few of their paths for the build's log. */
  devicesDropped = 0;
  readonly devicePaths: string[] = [];
  constructor(readonly limits: LayerLimits = DEFAULT_LAYER_LIMITS) {}
}

/** Applies one layer (a tar stream, gzip or not) onto `tree`. `name` is for messages. */
export async function applyLayer(tree: FileTree, blobs: BlobStore, layer: Readable, name: string, budget: LayerBudget): Promise<void> {
  // What this layer put: an opaque whiteout removes only what lies below it.
  const added = new Set<string>();
  const fail = (path: string, message: string): never => {
    throw new LayerError(`layer ${name}: ${path}: ${message}`);
  };
  try {
    for await (const entry of tarEntries(layer)) {
      if (++budget.entries > budget.limits.maxEntries) fail(entry.path, `the image has more than ${budget.limits.maxEntries} entries`);
      let parts: string[];
      try {
        parts = pathParts(entry.path);
      } catch (err) {
        return fail(entry.path, (err as Error).message);
      }
      const base = parts.at(-1) ?? '';
      if (base.startsWith(WHITEOUT_PREFIX)) {
        entry.resume();
        const dir = parts.slice(0, -1);
        if (base === OPAQUE_WHITEOUT) {
          const node = tree.get(dir);
          if (node?.children != null) {
            const prefix = dir.join('/');
            for (const child of [...node.children.keys()]) if (!added.has(prefix === '' ? child : `${prefix}/${child}`)) node.children.delete(child);
          }
        } else {
          const target = [...dir, base.slice(WHITEOUT_PREFIX.length)];
          if (target.at(-1) === '' || target.at(-1) === '..' || target.at(-1) === '.') fail(entry.path, 'a whiteout names no file');
          tree.remove(target);
        }
        continue;
      }
      const inode: Inode = { kind: 'file', mode: (entry.mode ?? 0o644) & 0o7777, uid: entry.uid ?? 0, gid: entry.gid ?? 0, mtime: Math.min(Math.max(Math.floor((entry.mtime?.getTime() ?? 0) / 1000), 0), 0xffffffff), size: 0, digest: null, target: null };
      if (!Number.isSafeInteger(inode.uid) || inode.uid < 0 || inode.uid > 0xfffffffe || !Number.isSafeInteger(inode.gid) || inode.gid < 0 || inode.gid > 0xfffffffe) fail(entry.path, 'its owner is not a valid uid/gid');
      if (FILE_TYPES.has(entry.type)) {
        budget.bytes += entry.size;
        if (budget.bytes > budget.limits.maxBytes) fail(entry.path, `the image holds more than ${budget.limits.maxBytes} bytes`);
        inode.size = entry.size;
        inode.digest = await blobs.put(entry, entry.size);
        tree.put(parts, inode, entry.path);
      } else if (entry.type === 'Link') {
        entry.resume();
        let targetParts: string[];
        try {
          targetParts = pathParts(entry.linkpath ?? '');
        } catch (err) {
          return fail(entry.path, `its link target: ${(err as Error).message}`);
        }
        const target = tree.get(targetParts);
        if (target === undefined || target.children !== null) fail(entry.path, `the hard link's target ${entry.linkpath ?? ''} is not a file in the image`);
        // One Inode, two names: the ext4 writer makes them one inode with two links.
        tree.put(parts, target!.inode, entry.path);
      } else {
        entry.resume();
        if (entry.type === 'Directory') inode.kind = 'dir';
        else if (entry.type === 'SymbolicLink') {
          const target = entry.linkpath ?? '';
          if (target === '' || /[\n\r\0]/.test(target) || Buffer.byteLength(target) > 4095) fail(entry.path, 'its symbolic link target is empty or not storable');
          inode.kind = 'symlink';
          inode.target = target;
        } else if (entry.type === 'FIFO') inode.kind = 'fifo';
        else if (entry.type === 'CharacterDevice' || entry.type === 'BlockDevice') {
          if (budget.devicePaths.length < 10) budget.devicePaths.push(`/${parts.join('/')}`);
          budget.devicesDropped++;
          continue;
        } else fail(entry.path, `tar entries of type ${entry.type} are not supported`);
        tree.put(parts, inode, entry.path);
      }
      added.add(parts.join('/'));
    }
  } catch (err) {
    if (err instanceof LayerError) throw err;
    throw new LayerError(`layer ${name}: ${(err as Error).message}`);
  }
}
