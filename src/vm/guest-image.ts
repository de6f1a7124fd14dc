/**
 * Builds the guest image from the recipe in guest/: a Debian rootfs (debootstrap), Debian's cloud
 * kernel, an initramfs that loads the virtio modules, and an ext4 root disk. Images are cached by
 * the hash of the recipe, so a changed recipe builds a new image and an unchanged one is reused.
 */
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync, copyFileSync, chmodSync, statSync, symlinkSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { runCommand } from '../platform/run-command.js';
import { AGENT_SOURCE_DIR, AGENT_SOURCE_FILES, agentGccArgs } from './agent/build.js';
import { digestFile } from './file-digest.js';

/** Bumped when the build steps change in a way the recipe files do not show. */
const BUILDER_VERSION = 6;
const RECIPE_FILES = ['recipe.json', 'initramfs-init', 'vessel-init'];

export const GUEST_RECIPE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../../../guest');

interface Recipe {
  suite: string;
  variant: string;
  mirror: string;
  packages: string[];
  kernelPackage: string;
  initramfsModules: string[];
  diskSizeMiB: number;
}

export interface GuestImage {
  hash: string;
  dir: string;
  kernel: string;
  initrd: string;
  rootfs: string;
  kernelVersion: string;
}

/** Progress of a long build, shown by the CLI as a bar (or as lines when not on a terminal). */
export interface BuildProgress {
  step(title: string, index: number, total: number): void;
  fraction(f: number): void;
  finish(message: string): void;
}

/** The recipe's files and the guest agent's sources: a change to any of them is a new image. */
export function recipeHash(recipeDir = GUEST_RECIPE_DIR, agentDir = AGENT_SOURCE_DIR): string {
  const h = createHash('sha256').update(`builder:${BUILDER_VERSION}\n`);
  for (const f of RECIPE_FILES) h.update(`${f}\n`).update(readFileSync(join(recipeDir, f)));
  for (const f of AGENT_SOURCE_FILES) h.update(`agent/${f}\n`).update(readFileSync(join(agentDir, f)));
  return h.digest('hex').slice(0, 16);
}

function imageAt(dir: string, hash: string): GuestImage | null {
  const manifest = join(dir, 'manifest.json');
  if (!existsSync(manifest)) return null;
  const m = JSON.parse(readFileSync(manifest, 'utf8')) as { kernelVersion: string };
  return { hash, dir, kernel: join(dir, 'vmlinuz'), initrd: join(dir, 'initrd.img'), rootfs: join(dir, 'rootfs.img'), kernelVersion: m.kernelVersion };
}

/**
 * The image's files byte for byte. The recipe's hash names an image, but two builds of one recipe
 * differ (debootstrap's timestamps, mkfs's UUIDs): a checkpoint's disk layers sit on one build
 * exactly, so only a host with the same files may take it (checkpoint-import.ts).
 */
export async function imageContentDigest(image: GuestImage): Promise<string> {
  const h = createHash('sha256');
  for (const f of [image.kernel, image.initrd, image.rootfs]) h.update(`${await digestFile(f)}\n`);
  return `sha256:${h.digest('hex')}`;
}

export function findImage(imagesDir: string, recipeDir = GUEST_RECIPE_DIR): GuestImage | null {
  const hash = recipeHash(recipeDir);
  return imageAt(join(imagesDir, hash), hash);
}

export async function buildImage(opts: { imagesDir: string; progress: BuildProgress; force?: boolean; recipeDir?: string; mirror?: string }): Promise<GuestImage> {
  const recipeDir = opts.recipeDir ?? GUEST_RECIPE_DIR;
  const hash = recipeHash(recipeDir);
  const finalDir = join(opts.imagesDir, hash);
  const existing = imageAt(finalDir, hash);
  if (existing !== null && opts.force !== true) return existing;

  const recipe = JSON.parse(readFileSync(join(recipeDir, 'recipe.json'), 'utf8')) as Recipe;
  const mirror = opts.mirror ?? recipe.mirror;
  const work = join(opts.imagesDir, `${hash}.build-${process.pid}`);
  rmSync(work, { recursive: true, force: true });
  mkdirSync(work, { recursive: true });
  const rootfs = join(work, 'rootfs');
  const out = join(work, 'out');
  mkdirSync(out);
  const p = opts.progress;
  const total = 5;
  try {
    p.step('debootstrap: Debian rootfs', 1, total);
    let lines = 0;
    mkdirSync(join(opts.imagesDir, 'debs'), { recursive: true });
    await runCommand(
      'debootstrap',
      [`--variant=${recipe.variant}`, `--include=${recipe.packages.join(',')}`, `--cache-dir=${join(opts.imagesDir, 'debs')}`, recipe.suite, rootfs, mirror],
      { onLine: () => p.fraction(Math.min(0.99, ++lines / 650)) },
    );

    p.step('kernel: Debian cloud kernel', 2, total);
    const kernelDir = join(work, 'kernel');
    const kernelVersion = await fetchKernel(recipe.kernelPackage, work, kernelDir);
    copyFileSync(join(kernelDir, 'boot', `vmlinuz-${kernelVersion}`), join(out, 'vmlinuz'));
    p.fraction(1);

    p.step('rootfs: vessel init and agent', 3, total);
    install(join(recipeDir, 'vessel-init'), join(rootfs, 'sbin/vessel-init'));
    // The guest agent (guest/agent/): static, so it is the guest's own program whatever libc the
    // host builds with.
    await runCommand('gcc', agentGccArgs(join(rootfs, 'sbin/vessel-agent')));
    // A fork's identity lives in memory: the kernel's hostname, and a hosts file on /run that
    // the agent rewrites (IDENTITY). The fork's disk overlay is not written for either.
    for (const [file, target] of [['etc/hostname', '/proc/sys/kernel/hostname'], ['etc/hosts', '/run/vessel/hosts']] as const) {
      rmSync(join(rootfs, file), { force: true });
      symlinkSync(target, join(rootfs, file));
    }
    for (const d of ['var/cache/apt/archives', 'var/lib/apt/lists']) {
      for (const f of readdirSync(join(rootfs, d))) if (f.endsWith('.deb') || f.includes('_dists_')) rmSync(join(rootfs, d, f), { force: true });
    }
    // Commands run with LANG=C.UTF-8. Without an archive, glibc opens and maps the locale's dozen
    // files on every exec, which costs 5 ms of a 21 ms /bin/true under TCG; from the archive it
    // is one mapping (bench/README.md, "exec").
    await runCommand('chroot', [rootfs, 'localedef', '--add-to-archive', '/usr/lib/locale/C.utf8']);
    writeFileSync(join(rootfs, 'etc/resolv.conf'), 'nameserver 127.0.0.1\n');
    rmSync(join(rootfs, 'etc/machine-id'), { force: true });

    p.step('initramfs: busybox and virtio modules', 4, total);
    await buildInitramfs(recipe, recipeDir, kernelDir, kernelVersion, join(work, 'initramfs'), join(out, 'initrd.img'));

    p.step(`rootfs.img: ext4 of ${recipe.diskSizeMiB} MiB`, 5, total);
    await runCommand('mkfs.ext4', ['-q', '-F', '-L', 'vessel-root', '-d', rootfs, join(out, 'rootfs.img'), `${recipe.diskSizeMiB}M`]);
    chmodSync(join(out, 'rootfs.img'), 0o444);
    writeFileSync(join(out, 'manifest.json'), JSON.stringify({ hash, kernelVersion, suite: recipe.suite, builtAt: new Date().toISOString() }, null, 2));

    rmSync(finalDir, { recursive: true, force: true });
    renameSync(out, finalDir);
    p.finish(`guest image ${hash} ready (${Math.round(statSync(join(finalDir, 'rootfs.img')).blocks * 512 / 1048576)} MiB used)`);
    return imageAt(finalDir, hash)!;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/** busybox-static's binary on the host (checked by host-packages.ts). */
const hostBusybox = (): string => (existsSync('/usr/bin/busybox') ? '/usr/bin/busybox' : '/bin/busybox');

function install(from: string, to: string): void {
  copyFileSync(from, to);
  chmodSync(to, 0o755);
}

/** Downloads the kernel package and unpacks it without running its scripts (no initramfs-tools, no bootloader). */
async function fetchKernel(metaPackage: string, work: string, into: string): Promise<string> {
  const depends = async () => (await runCommand('apt-cache', ['depends', '--important', metaPackage])).match(/Depends: (linux-image-\S+)/)?.[1];
  let pkg = await depends().catch(() => undefined);
  if (pkg === undefined) {
    await runCommand('apt-get', ['update']);
    pkg = await depends();
  }
  if (pkg === undefined) throw new Error(`cannot resolve ${metaPackage} to a kernel package`);
  const debDir = join(work, 'kernel-deb');
  mkdirSync(debDir);
  await runCommand('apt-get', ['download', pkg], { cwd: debDir });
  const deb = readdirSync(debDir).find((f) => f.endsWith('.deb'));
  if (deb === undefined) throw new Error(`apt-get download ${pkg} produced no .deb`);
  await runCommand('dpkg-deb', ['-x', join(debDir, deb), into]);
  return pkg.replace(/^linux-image-/, '');
}

async function buildInitramfs(recipe: Recipe, recipeDir: string, kernelDir: string, version: string, dir: string, target: string): Promise<void> {
  for (const d of ['bin', 'lib/modules', 'dev', 'proc', 'sys', 'newroot']) mkdirSync(join(dir, d), { recursive: true });
  copyFileSync(hostBusybox(), join(dir, 'bin/busybox'));
  chmodSync(join(dir, 'bin/busybox'), 0o755);
  install(join(recipeDir, 'initramfs-init'), join(dir, 'init'));
  const modulesRoot = join(kernelDir, 'lib/modules', version, 'kernel');
  const all = (await runCommand('find', [modulesRoot, '-name', '*.ko'])).split('\n').filter(Boolean);
  for (const name of recipe.initramfsModules) {
    const file = all.find((f) => f.endsWith(`/${name}.ko`));
    if (file === undefined) throw new Error(`kernel module ${name} not found in ${version}`);
    copyFileSync(file, join(dir, 'lib/modules', `${name}.ko`));
  }
  writeFileSync(join(dir, 'modules.order'), recipe.initramfsModules.join('\n') + '\n');
  await runCommand('sh', ['-c', `cd "${dir}" && find . | cpio -o -H newc --quiet | gzip -1 > "${target}"`]);
}

/**
 * The image's own static vessel-agent, copied out of its rootfs for templates' guest kit
 * (docs/templates.md): the API's process builds templates and reads it, so it goes where that
 * user can (DATA_DIR/guest-kit, 0755, root's), named by the image's hash. debugfs reads the
 * image, which this host built, never a template's disk.
 */
export async function guestKitAgent(image: GuestImage, dataDir: string): Promise<string> {
  const dir = join(dataDir, 'guest-kit');
  mkdirSync(dir, { recursive: true, mode: 0o755 });
  chmodSync(dir, 0o755);
  const file = join(dir, `vessel-agent-${image.hash}`);
  if (existsSync(file)) return file;
  const tmp = `${file}.tmp-${process.pid}`;
  rmSync(tmp, { force: true });
  await runCommand('debugfs', ['-R', `dump -p /sbin/vessel-agent ${tmp}`, image.rootfs]);
  if (!existsSync(tmp) || statSync(tmp).size === 0) throw new Error(`the guest image ${image.hash} has no /sbin/vessel-agent`);
  chmodSync(tmp, 0o755);
  renameSync(tmp, file);
  return file;
}
