/**
 * A build context, as a client sends it: a tar stream (gzip or not) of the directory a
 * Dockerfile builds from. It is read entry by entry into a FileTree whose contents go to a
 * BlobStore; nothing of it is ever written to the host under a name it chose. Then
 * `.dockerignore` takes out what it names, as Docker's client would have before sending.
 *
 * Only what a context can hold is taken: files, directories, symbolic links (kept as links,
 * never followed) and hard links (to a file earlier in the stream, stored as that file's
 * content). Device nodes, FIFOs, `..` paths and paths through a link are refused, as are
 * streams beyond the limits; each refusal is an `invalid_argument` that says which entry.
 */
import type { Readable } from 'node:stream';
import { VesselError } from '../core/errors.js';
import type { BlobStore } from './blob-store.js';
import { MAX_DOCKERFILE_BYTES } from './dockerfile.js';
import { Dockerignore, DockerignoreError } from './dockerignore.js';
import { FileTree, pathParts, TreeError, type Inode, type TreeNode } from './file-tree.js';
import { tarEntries, TarError } from './tar-entries.js';

export interface ContextLimits {
  /** The sum of the files' sizes. */
  maxBytes: number;
  /** Entries in the stream. */
  maxEntries: number;
}

export const DEFAULT_CONTEXT_LIMITS: ContextLimits = { maxBytes: 1024 * 1024 * 1024, maxEntries: 100_000 };

export class ContextError extends VesselError {
  constructor(message: string) {
    super('invalid_argument', `build context: ${message}`);
  }
}

export interface BuildContext {
  tree: FileTree;
  /** The Dockerfile's text, when it came in the context. */
  dockerfile: string | null;
  /** Files and links that .dockerignore took out (directories are not counted). */
  ignored: number;
  /** The sum of the sizes of the files that stayed. */
  bytes: number;
}

export interface ReadContextOptions {
  blobs: BlobStore;
  /** Where the Dockerfile is in the context; null when it comes beside the context. */
  dockerfilePath?: string | null;
  limits?: Partial<ContextLimits>;
}

const FILE_TYPES = new Set(['File', 'OldFile', 'ContiguousFile']);

export async function readBuildContext(source: Readable, opts: ReadContextOptions): Promise<BuildContext> {
  const limits = { ...DEFAULT_CONTEXT_LIMITS, ...opts.limits };
  const tree = new FileTree();
  let entries = 0;
  let bytes = 0;
  try {
    for await (const entry of tarEntries(source)) {
      if (++entries > limits.maxEntries) throw new ContextError(`more than ${limits.maxEntries} entries`);
      const parts = pathParts(entry.path);
      const inode: Inode = { kind: 'file', mode: (entry.mode ?? 0o644) & 0o7777, uid: 0, gid: 0, mtime: Math.min(Math.max(Math.floor((entry.mtime?.getTime() ?? 0) / 1000), 0), 0xffffffff), size: 0, digest: null, target: null };
      if (FILE_TYPES.has(entry.type)) {
        bytes += entry.size;
        if (bytes > limits.maxBytes) throw new ContextError(`its files hold more than ${limits.maxBytes} bytes`);
        inode.size = entry.size;
        inode.digest = await opts.blobs.put(entry, entry.size);
      } else {
        entry.resume();
        if (entry.type === 'Directory') inode.kind = 'dir';
        else if (entry.type === 'SymbolicLink') {
          inode.kind = 'symlink';
          inode.target = linkTarget(entry.linkpath, entry.path);
        } else if (entry.type === 'Link') {
          const target = tree.get(pathParts(entry.linkpath ?? ''));
          if (target?.inode.kind !== 'file') throw new ContextError(`the hard link ${entry.path} points to ${entry.linkpath ?? '(nothing)'}, which is not a file earlier in the stream`);
          bytes += target.inode.size;
          if (bytes > limits.maxBytes) throw new ContextError(`its files hold more than ${limits.maxBytes} bytes`);
          Object.assign(inode, { size: target.inode.size, digest: target.inode.digest, mode: target.inode.mode });
        } else throw new ContextError(`${entry.path} is a ${describeType(entry.type)}: a build context holds files, directories and links`);
      }
      tree.put(parts, inode, entry.path);
    }
  } catch (err) {
    throw asContextError(err);
  }
  const dockerfilePath = opts.dockerfilePath === undefined ? 'Dockerfile' : opts.dockerfilePath;
  let dockerfile: string | null = null;
  try {
    if (dockerfilePath !== null) {
      const node = tree.get(pathParts(dockerfilePath));
      if (node?.inode.kind !== 'file') throw new ContextError(`there is no Dockerfile at ${dockerfilePath}`);
      if (node.inode.size > MAX_DOCKERFILE_BYTES) throw new ContextError(`${dockerfilePath} is larger than ${MAX_DOCKERFILE_BYTES} bytes`);
      dockerfile = opts.blobs.read(node.inode.digest!).toString('utf8');
    }
    // BuildKit's rule: <Dockerfile>.dockerignore beside the Dockerfile first, else the context's.
    const ignoreFile = [...(dockerfilePath === null ? [] : [`${dockerfilePath}.dockerignore`]), '.dockerignore']
      .map((p) => tree.get(pathParts(p)))
      .find((n) => n?.inode.kind === 'file');
    let ignored = 0;
    if (ignoreFile !== undefined) {
      if (ignoreFile.inode.size > 64 * 1024) throw new ContextError('.dockerignore is larger than 64 KiB');
      const ignore = Dockerignore.parse(opts.blobs.read(ignoreFile.inode.digest!).toString('utf8'));
      ignored = applyIgnore(tree, ignore);
    }
    opts.blobs.retain(tree.digests());
    let kept = 0;
    for (const [, n] of tree.walk()) kept += n.inode.kind === 'file' ? n.inode.size : 0;
    return { tree, dockerfile, ignored, bytes: kept };
  } catch (err) {
    throw asContextError(err);
  }
}

function asContextError(err: unknown): unknown {
  if (err instanceof TreeError || err instanceof TarError || err instanceof DockerignoreError) return new ContextError(err.message);
  return err;
}

function linkTarget(target: string | undefined, path: string): string {
  if (target === undefined || target === '') throw new ContextError(`the symbolic link ${path} has no target`);
  if (target.includes('\n') || target.includes('\0') || Buffer.byteLength(target) > 4095) throw new ContextError(`the symbolic link ${path} has a target no file system can hold`);
  return target;
}

const describeType = (type: string): string =>
  ({ CharacterDevice: 'character device', BlockDevice: 'block device', FIFO: 'FIFO' })[type] ?? `tar entry of type ${type}`;

/**
 * Takes out what `.dockerignore` names. A directory that is ignored still keeps what a `!`
 * pattern brings back under it; with no `!` pattern, an ignored directory goes whole without
 * a look inside (Docker's walker does the same).
 */
function applyIgnore(tree: FileTree, ignore: Dockerignore): number {
  let ignored = 0;
  const visit = (node: TreeNode, path: string): boolean => {
    const out = path !== '' && ignore.ignores(path);
    if (node.children === null || (out && !ignore.hasExceptions)) {
      if (out) for (const [, n] of tree.walk(node)) ignored += n.children === null ? 1 : 0;
      return !out;
    }
    let keptChild = false;
    for (const [name, child] of [...node.children]) {
      if (visit(child, path === '' ? name : `${path}/${name}`)) keptChild = true;
      else node.children.delete(name);
    }
    return !out || keptChild;
  };
  visit(tree.root, '');
  return ignored;
}
