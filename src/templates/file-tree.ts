/**
 * A file system as data: what a build context or an image's layers hold, built in memory from
 * hostile tar entries and never from the host's own file system. Paths are checked once, here:
 * no `..`, no component through a symbolic link, nothing longer than ext4 takes. Contents live
 * in a BlobStore by digest; the tree holds their digests.
 */
import { createHash } from 'node:crypto';

/** Linux's PATH_MAX and NAME_MAX, which ext4 and the guest's tools hold to. */
export const MAX_PATH_BYTES = 4095;
export const MAX_NAME_BYTES = 255;

/**
 * Files and directories in one tree, those a path implies included: one entry of a 4 KiB path
 * can imply two thousand directories, so the cap is on nodes, not entries.
 */
export const MAX_NODES = 1_000_000;

export class TreeError extends Error {}

export type Kind = 'file' | 'dir' | 'symlink' | 'fifo';

/** What an inode holds; hard links are two names for one Inode object. */
export interface Inode {
  kind: Kind;
  /** Permission bits and setuid/setgid/sticky (07777). */
  mode: number;
  uid: number;
  gid: number;
  /** Seconds since the epoch. */
  mtime: number;
  size: number;
  /** Files: the content's digest in the BlobStore. */
  digest: string | null;
  /** Symbolic links: the target, as data: never followed on the host. */
  target: string | null;
}

export interface TreeNode {
  inode: Inode;
  /** Directories only. */
  children: Map<string, TreeNode> | null;
}

/**
 * A path from a tar entry as its components: a leading `/` or `./` is dropped, `.` and empty
 * components too; `..` anywhere is refused (no legitimate archive needs one, and a hostile one
 * uses it to climb out), as are names and paths longer than Linux allows and newlines (which no
 * tool in the chain can carry).
 */
export function pathParts(raw: string): string[] {
  if (raw.includes('\0')) throw new TreeError('a path holds a NUL byte');
  if (Buffer.byteLength(raw) > MAX_PATH_BYTES) throw new TreeError(`a path is longer than ${MAX_PATH_BYTES} bytes: ${raw.slice(0, 80)}…`);
  if (/[\n\r]/.test(raw)) throw new TreeError(`the path ${JSON.stringify(raw)} holds a line break`);
  const parts = raw.split('/').filter((p) => p !== '' && p !== '.');
  for (const p of parts) {
    if (p === '..') throw new TreeError(`the path ${raw} climbs out of its root with ..`);
    if (Buffer.byteLength(p) > MAX_NAME_BYTES) throw new TreeError(`a name is longer than ${MAX_NAME_BYTES} bytes in ${raw}`);
  }
  return parts;
}

export const dirInode = (mode = 0o755, uid = 0, gid = 0, mtime = 0): Inode => ({ kind: 'dir', mode, uid, gid, mtime, size: 0, digest: null, target: null });

export class FileTree {
  readonly root: TreeNode = { inode: dirInode(), children: new Map() };
  #nodes = 1;

  constructor(readonly maxNodes = MAX_NODES) {}

  #count(n: number): void {
    this.#nodes += n;
    if (this.#nodes > this.maxNodes) throw new TreeError(`more than ${this.maxNodes} files and directories`);
  }

  /** The node at `parts`, not following symbolic links; undefined if there is none. */
  get(parts: string[]): TreeNode | undefined {
    let node: TreeNode | undefined = this.root;
    for (const p of parts) {
      node = node.children?.get(p);
      if (node === undefined) return undefined;
    }
    return node;
  }

  /**
   * The directory that holds `parts`' last component, made (0755, root's) where missing. A
   * component that is a symbolic link or a file is refused: the tree is never entered through a
   * link, so no entry can land outside it, however the links point.
   */
  #parent(parts: string[], raw: string): Map<string, TreeNode> {
    let dir = this.root.children!;
    let path = '';
    for (const p of parts.slice(0, -1)) {
      path += `/${p}`;
      let node = dir.get(p);
      if (node === undefined) {
        node = { inode: dirInode(), children: new Map() };
        dir.set(p, node);
        this.#count(1);
      }
      if (node.children === null) {
        throw new TreeError(node.inode.kind === 'symlink' ? `${raw} would be written through the symbolic link ${path}` : `${raw} is under ${path}, which is not a directory`);
      }
      dir = node.children;
    }
    return dir;
  }

  /**
   * Puts an entry at `parts`, as unpacking a tar does: a directory over a directory only takes
   * the new metadata (its contents stay); anything else replaces what was there.
   */
  put(parts: string[], inode: Inode, raw: string): TreeNode {
    if (parts.length === 0) {
      if (inode.kind !== 'dir') throw new TreeError(`the root can only be a directory, not a ${inode.kind}`);
      this.root.inode = inode;
      return this.root;
    }
    const dir = this.#parent(parts, raw);
    const name = parts.at(-1)!;
    const old = dir.get(name);
    if (old !== undefined && old.children !== null && inode.kind === 'dir') {
      old.inode = inode;
      return old;
    }
    if (old !== undefined) this.#nodes -= countNodes(old);
    const node: TreeNode = { inode, children: inode.kind === 'dir' ? new Map() : null };
    dir.set(name, node);
    this.#count(1);
    return node;
  }

  /** Removes `parts` and everything under it; false if there was nothing. */
  remove(parts: string[]): boolean {
    if (parts.length === 0) throw new TreeError('the root cannot be removed');
    const parent = this.get(parts.slice(0, -1));
    const node = parent?.children?.get(parts.at(-1)!);
    if (node === undefined) return false;
    parent!.children!.delete(parts.at(-1)!);
    this.#nodes -= countNodes(node);
    return true;
  }

  /**
   * Every node with its absolute path ('' for the root), parents before their children and
   * children by name: the order to recreate them in. A stack, not recursion: a path may be two
   * thousand directories deep.
   */
  *walk(from: TreeNode = this.root, path = ''): Generator<[string, TreeNode]> {
    const stack: [string, TreeNode][] = [[path, from]];
    for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
      yield item;
      const [at, node] = item;
      if (node.children === null) continue;
      const names = [...node.children.keys()].sort().reverse();
      for (const name of names) stack.push([`${at}/${name}`, node.children.get(name)!]);
    }
  }

  /** The digests of every file's content: what the BlobStore must keep. */
  digests(): Set<string> {
    const out = new Set<string>();
    for (const [, n] of this.walk()) if (n.inode.digest !== null) out.add(n.inode.digest);
    return out;
  }
}

export function countNodes(node: TreeNode): number {
  let n = 0;
  const stack = [node];
  for (let next = stack.pop(); next !== undefined; next = stack.pop()) {
    n++;
    if (next.children !== null) for (const child of next.children.values()) stack.push(child);
  }
  return n;
}

/**
 * A digest of a subtree: names, kinds, modes, owners, contents' digests and links' targets, in
 * a fixed order; not times, so an unchanged file copied again keeps its digest (Docker's cache
 * ignores mtimes too). This is what a COPY step's cache key covers (step-keys.ts).
 */
export function treeDigest(node: TreeNode): string {
  const h = createHash('sha256');
  for (const [path, n] of new FileTree().walk(node)) {
    const i = n.inode;
    h.update(`${JSON.stringify([path, i.kind, i.mode, i.uid, i.gid, i.digest, i.target])}\n`);
  }
  return `sha256:${h.digest('hex')}`;
}
