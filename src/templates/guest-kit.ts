/**
 * What makes an image's root file system a Vessel guest, laid into its FileTree before the ext4
 * is written. An arbitrary image has no init of ours, often no shell (distroless), maybe musl
 * rather than glibc (Alpine), maybe no tini, mount or ip; so the kit brings its own, all static,
 * in one directory of its own, /.vessel:
 *
 *   /.vessel/bin/busybox        busybox-static: sh, mount, ip, hostname… for vessel-init only
 *   /.vessel/bin/<applet>       links to it, the applets vessel-init uses
 *   /.vessel/bin/tini           tini-static, PID 1: reaps orphans, and its exit panics the guest
 *   /.vessel/bin/vessel-agent   the static guest agent
 *   /sbin/vessel-init           vessel-init with /.vessel/bin first on its PATH
 *   /usr/bin/tini               a link to /.vessel/bin/tini, unless the image has a tini
 *
 * The last two are where today's initramfs hands over (`switch_root /newroot /usr/bin/tini -s
 * -g -- /sbin/vessel-init`), so an image boots with the default image's kernel and initrd
 * unchanged. They are placed through the image's own links (/sbin is a link to usr/sbin in
 * merged-/usr images), resolved inside the tree, never on the host.
 *
 * And what exec and a fork's identity expect (as guest-image.ts does for the default image):
 * /etc/hostname and /etc/hosts as links into memory, /etc/resolv.conf a file vessel-init can
 * write, the mount points, /root and root in /etc/passwd and /etc/group when the image has none,
 * and the gateway's CA in the system bundle when one is given.
 */
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import type { BlobStore } from './blob-store.js';
import { dirInode, type FileTree, type Inode, type TreeNode } from './file-tree.js';

export const KIT_DIR = '/.vessel';
export const KIT_BIN = `${KIT_DIR}/bin`;
/** The applets guest/vessel-init runs. */
const APPLETS = ['sh', 'mount', 'mkdir', 'hostname', 'printf', 'ip', 'cat', 'basename', 'echo'];

export interface GuestKit {
  /** Host paths of the static binaries. */
  busybox: string;
  tini: string;
  agent: string;
  /** guest/vessel-init's text. */
  vesselInit: string;
  /** The gateway's CA, PEM; added to the image's bundle. */
  caPem?: string;
}

export class KitError extends Error {}

/**
 * The default image's vessel-init, run by the kit's busybox: its own applets first on PATH while
 * it runs (the agent's commands get the env the host sends, not this one), the agent from the kit.
 */
export function kitInit(vesselInit: string): string {
  const lines = vesselInit.split('\n');
  if (!lines[0]!.startsWith('#!')) throw new KitError('vessel-init has no #! line');
  lines[0] = `#!${KIT_BIN}/sh`;
  const path = lines.findIndex((l) => l.startsWith('export PATH='));
  if (path < 0) throw new KitError('vessel-init sets no PATH');
  lines[path] = `export PATH=${KIT_BIN}:${lines[path]!.slice('export PATH='.length)}`;
  const text = lines.join('\n');
  if (!text.includes('/sbin/vessel-agent')) throw new KitError('vessel-init does not start /sbin/vessel-agent');
  return text.replaceAll('/sbin/vessel-agent', `${KIT_BIN}/vessel-agent`);
}

const split = (path: string): string[] => path.split('/').filter((p) => p !== '' && p !== '.');

/**
 * `path` inside the tree with its directories' symbolic links followed as the guest's kernel
 * would (absolute targets from the image's root, `..` stopping at it), up to 40 links. Missing
 * directories are made. Returns the parent's components and the last name.
 */
export function resolveInTree(tree: FileTree, path: string): { dir: string[]; name: string } {
  let hops = 0;
  const todo = split(path);
  const name = todo.pop();
  if (name === undefined) throw new KitError(`${path} names the root`);
  const dir: string[] = [];
  while (todo.length > 0) {
    const part = todo.shift()!;
    if (part === '..') {
      dir.pop();
      continue;
    }
    const parent = tree.get(dir)!;
    let node = parent.children!.get(part);
    if (node === undefined) node = tree.put([...dir, part], dirInode(), path);
    if (node.inode.kind === 'symlink') {
      if (++hops > 40) throw new KitError(`${path}: too many levels of symbolic links in the image`);
      const target = node.inode.target!;
      if (target.startsWith('/')) dir.length = 0;
      todo.unshift(...split(target));
      continue;
    }
    if (node.children === null) throw new KitError(`${path}: /${[...dir, part].join('/')} is not a directory in the image`);
    dir.push(part);
  }
  return { dir, name };
}

const fileInode = (digest: string, size: number, mode: number): Inode => ({ kind: 'file', mode, uid: 0, gid: 0, mtime: 0, size, digest, target: null });
const linkInode = (target: string): Inode => ({ kind: 'symlink', mode: 0o777, uid: 0, gid: 0, mtime: 0, size: 0, digest: null, target });

async function store(blobs: BlobStore, data: Buffer): Promise<string> {
  return blobs.put(Readable.from([data]), data.length);
}

/** Where `path` leads in the image, its last component's links followed too (up to 40). */
function finalPath(tree: FileTree, path: string): string {
  for (let hops = 0; hops < 40; hops++) {
    const { dir, name } = resolveInTree(tree, path);
    const node = tree.get([...dir, name]);
    if (node?.inode.kind !== 'symlink') return `/${[...dir, name].join('/')}`;
    const target = node.inode.target!;
    path = target.startsWith('/') ? target : `/${dir.join('/')}/${target}`;
  }
  throw new KitError(`${path}: too many levels of symbolic links in the image`);
}

/** The node the path leads to, or undefined. */
function fileAt(tree: FileTree, path: string): TreeNode | undefined {
  return tree.get(split(finalPath(tree, path)));
}

export async function addGuestKit(tree: FileTree, blobs: BlobStore, kit: GuestKit): Promise<void> {
  const put = async (path: string, data: Buffer, mode: number) => {
    const { dir, name } = resolveInTree(tree, path);
    tree.put([...dir, name], fileInode(await store(blobs, data), data.length, mode), path);
  };
  const link = (path: string, target: string) => {
    const { dir, name } = resolveInTree(tree, path);
    tree.put([...dir, name], linkInode(target), path);
  };
  // Our own directory, fresh: whatever the image had there (a link elsewhere included) goes.
  tree.remove(split(KIT_DIR));
  tree.put(split(KIT_DIR), dirInode(0o755), KIT_DIR);
  await put(`${KIT_BIN}/busybox`, readFileSync(kit.busybox), 0o755);
  for (const applet of APPLETS) link(`${KIT_BIN}/${applet}`, 'busybox');
  await put(`${KIT_BIN}/tini`, readFileSync(kit.tini), 0o755);
  await put(`${KIT_BIN}/vessel-agent`, readFileSync(kit.agent), 0o755);
  await put('/sbin/vessel-init', Buffer.from(kitInit(kit.vesselInit)), 0o755);
  if (fileAt(tree, '/usr/bin/tini')?.inode.kind !== 'file') link('/usr/bin/tini', `${KIT_BIN}/tini`);

  for (const [path, mode] of [['/proc', 0o555], ['/sys', 0o555], ['/dev', 0o755], ['/run', 0o755], ['/tmp', 0o1777], ['/root', 0o700], ['/etc', 0o755]] as const) {
    const { dir, name } = resolveInTree(tree, path);
    const node = tree.get([...dir, name]);
    if (node === undefined || node.children === null) tree.put([...dir, name], dirInode(mode), path);
  }
  // A fork's identity lives in memory (guest-image.ts): no write to its disk for it.
  link('/etc/hostname', '/proc/sys/kernel/hostname');
  link('/etc/hosts', '/run/vessel/hosts');
  await put('/etc/resolv.conf', Buffer.from('nameserver 127.0.0.1\n'), 0o644);
  if (fileAt(tree, '/etc/passwd')?.inode.kind !== 'file') await put('/etc/passwd', Buffer.from('root:x:0:0:root:/root:/bin/sh\n'), 0o644);
  if (fileAt(tree, '/etc/group')?.inode.kind !== 'file') await put('/etc/group', Buffer.from('root:x:0:\n'), 0o644);

  if (kit.caPem !== undefined) {
    const pem = Buffer.from(kit.caPem.endsWith('\n') ? kit.caPem : `${kit.caPem}\n`);
    await put('/usr/local/share/ca-certificates/vessel-egress-ca.crt', pem, 0o644);
    // The bundle SSL_CERT_FILE names (guest-exec.ts), wherever the image's links put it.
    const bundlePath = finalPath(tree, '/etc/ssl/certs/ca-certificates.crt');
    const bundle = tree.get(split(bundlePath));
    const existing = bundle?.inode.kind === 'file' ? blobs.read(bundle.inode.digest!) : Buffer.alloc(0);
    await put(bundlePath, Buffer.concat([existing, pem]), 0o644);
  }
}
