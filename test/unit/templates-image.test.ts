/**
 * OCI images into root disks, with the real tools: skopeo pulls from docker-registry on loopback
 * and reads `docker save` and OCI archives, layers are applied onto a file tree, debugfs writes the
 * ext4 and reads it back. Needs skopeo, docker-registry, tini (tini-static), busybox-static, gcc
 * and e2fsprogs (see docs/templates.md).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BlobStore } from '../../src/templates/blob-store.js';
import { writeExt4 } from '../../src/templates/ext4-image.js';
import { FileTree } from '../../src/templates/file-tree.js';
import { addGuestKit, kitInit, type GuestKit } from '../../src/templates/guest-kit.js';
import { imageRootfs, imageTree } from '../../src/templates/image-rootfs.js';
import { ImageError, readLayout } from '../../src/templates/oci-image.js';
import { GUEST_RECIPE_DIR } from '../../src/vm/guest-image.js';
import { buildAgent } from '../support/agent-harness.js';
import { LocalRegistry, writeOciLayout } from '../support/oci-layout.js';
import { tarOf, type TarEntrySpec } from '../support/tar-stream.js';

let root: string;
let registry: LocalRegistry;
let kit: GuestKit;

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'vessel-image-'));
  chownSync(root, 65534, 65534);
  registry = await LocalRegistry.start(join(root, 'registry'));
  const agent = buildAgent();
  if ('skip' in agent) throw new Error(agent.skip);
  kit = {
    busybox: existsSync('/usr/bin/busybox') ? '/usr/bin/busybox' : '/bin/busybox',
    tini: '/usr/bin/tini-static',
    agent: agent.binary,
    vesselInit: readFileSync(join(GUEST_RECIPE_DIR, 'vessel-init'), 'utf8'),
    caPem: '-----BEGIN CERTIFICATE-----\nVESSELTESTCA\n-----END CERTIFICATE-----\n',
  };
});

after(() => {
  registry?.stop();
  rmSync(root, { recursive: true, force: true });
});

let n = 0;
const freshDir = (name: string): string => {
  const dir = join(root, `${name}-${++n}`);
  mkdirSync(dir);
  return dir;
};

/** A small distribution: merged /usr, a setuid binary with a hard link, a user's home; then a whiteout, an opaque directory and a FIFO; then one more file. */
const LAYERS: TarEntrySpec[][] = [
  [
    { path: 'etc/', type: 'Directory' },
    { path: 'etc/os-release', body: 'ID=testos\n' },
    { path: 'etc/ssl/certs/ca-certificates.crt', body: 'SYSTEM CAS\n' },
    { path: 'usr/bin/', type: 'Directory' },
    { path: 'usr/sbin/', type: 'Directory' },
    { path: 'bin', type: 'SymbolicLink', linkpath: 'usr/bin' },
    { path: 'sbin', type: 'SymbolicLink', linkpath: 'usr/sbin' },
    { path: 'usr/bin/prog', body: '#!/bin/sh\necho prog\n', mode: 0o4755 },
    { path: 'usr/bin/prog-alias', type: 'Link', linkpath: 'usr/bin/prog' },
    { path: 'home/user/', type: 'Directory', uid: 1000, gid: 1000, mode: 0o750 },
    { path: 'home/user/.profile', body: 'export A=1\n', uid: 1000, gid: 1000 },
    { path: 'app/old.txt', body: 'old\n' },
    { path: 'app/keep.txt', body: 'keep\n' },
    { path: 'data/a', body: 'a' },
    { path: 'data/b', body: 'b' },
    { path: 'name with "quotes" and spaces', body: 'odd\n' },
    { path: 'lost+found/', type: 'Directory', mode: 0o700 },
  ],
  [
    { path: 'app/.wh.old.txt', body: '' },
    { path: 'data/.wh..wh..opq', body: '' },
    { path: 'data/c', body: 'c' },
    { path: 'run/pipe', type: 'FIFO' },
  ],
  [{ path: 'app/new.txt', body: 'new\n' }],
];

const layout = (dir: string, layers = LAYERS) =>
  writeOciLayout(dir, { layers: layers.map((l, i) => tarOf(l, { gzip: i !== 2 })), config: { Env: ['PATH=/usr/bin', 'LANG=C.UTF-8'], Cmd: ['/usr/bin/prog'], WorkingDir: '/app', User: '1000', Labels: { a: 'b' } } });

/** debugfs's view of one path of an ext4 image. */
const debugfs = (img: string, request: string): string => execFileSync('debugfs', ['-R', request, img], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });

/** The names in a directory of an ext4 image (debugfs's parseable listing: /inode/mode/uid/gid/name/size/). */
const names = (img: string, dir: string): string[] =>
  debugfs(img, `ls -p ${dir}`).split('\n').map((l) => l.split('/')[5]).filter((x): x is string => x !== undefined && x !== '.' && x !== '..').sort();

function assertImageDisk(img: string): void {
  assert.equal(debugfs(img, 'cat /app/keep.txt'), 'keep\n');
  assert.equal(debugfs(img, 'cat /app/new.txt'), 'new\n');
  assert.deepEqual(names(img, '/app'), ['keep.txt', 'new.txt'], 'the whiteout removed old.txt');
  assert.deepEqual(names(img, '/data'), ['c'], 'the opaque whiteout dropped what the layer below put there');
  const prog = debugfs(img, 'stat /usr/bin/prog');
  assert.match(prog, /Mode:\s+04755/);
  assert.match(prog, /Links: 2/);
  assert.equal(debugfs(img, 'stat /usr/bin/prog-alias').match(/Inode: (\d+)/)?.[1], prog.match(/Inode: (\d+)/)?.[1], 'one inode, two names');
  assert.match(debugfs(img, 'stat /home/user/.profile'), /User:\s+1000\s+Group:\s+1000/);
  assert.match(debugfs(img, 'stat /run/pipe'), /Type: FIFO/);
  assert.equal(debugfs(img, 'cat "/name with ""quotes"" and spaces"'), 'odd\n');
  // The kit, placed through the image's merged-/usr links.
  assert.match(debugfs(img, 'stat /usr/sbin/vessel-init'), /Type: regular/);
  assert.match(debugfs(img, 'cat /usr/sbin/vessel-init'), /^#!\/\.vessel\/bin\/sh\n[\s\S]*exec \/\.vessel\/bin\/vessel-agent --channel/);
  assert.match(debugfs(img, 'stat /.vessel/bin/vessel-agent'), /Mode:\s+0755/);
  assert.match(debugfs(img, 'stat /usr/bin/tini'), /Type: symlink[\s\S]*Fast link dest: "\/\.vessel\/bin\/tini"/);
  assert.match(debugfs(img, 'stat /etc/hosts'), /Fast link dest: "\/run\/vessel\/hosts"/);
  assert.equal(debugfs(img, 'cat /etc/ssl/certs/ca-certificates.crt'), `SYSTEM CAS\n${kit.caPem}`);
  assert.match(debugfs(img, 'stat /tmp'), /Mode:\s+01777/);
}

test('an image from a registry on loopback, pulled by skopeo as nobody, becomes an ext4 root disk with the Vessel guest in it', async () => {
  const source = freshDir('source');
  layout(source);
  const layers = readLayout(source).layers.map((l) => l.digest);
  execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', '--dest-tls-verify=false', `oci:${source}:image`, `docker://${registry.host}/team/app:1`]);
  const work = freshDir('work');
  chownSync(work, 65534, 65534);
  const img = join(freshDir('out'), 'rootfs.ext4');
  const result = await imageRootfs({ kind: 'registry', reference: `${registry.host}/team/app:1`, insecure: true }, img, {
    workDir: work, blobs: new BlobStore(join(freshDir('blobs'), 'b')), kit, diskBytes: 256 * 1024 * 1024, runAs: { uid: 65534, gid: 65534 },
  });
  // The gzip layers come back byte for byte; the plain one skopeo gzipped on its way to the registry.
  assert.deepEqual(result.image.layers.map((l) => l.digest).slice(0, 2), layers.slice(0, 2));
  assert.equal(result.image.layers[2]!.mediaType, 'application/vnd.oci.image.layer.v1.tar+gzip');
  assert.deepEqual(result.image.config.cmd, ['/usr/bin/prog']);
  assert.equal(result.image.config.workdir, '/app');
  assert.equal(result.image.config.user, '1000');
  assert.deepEqual(result.image.config.env, [['PATH', '/usr/bin'], ['LANG', 'C.UTF-8']]);
  assertImageDisk(img);
});

test('the same image from a docker save archive and from an OCI archive', async () => {
  const source = freshDir('source');
  layout(source);
  for (const transport of ['docker-archive', 'oci-archive']) {
    const archive = join(freshDir('archive'), 'image.tar');
    execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', `oci:${source}:image`, `${transport}:${archive}${transport === 'docker-archive' ? ':team/app:1' : ''}`]);
    const img = join(freshDir('out'), 'rootfs.ext4');
    await imageRootfs({ kind: 'archive', path: archive }, img, { workDir: freshDir('work'), blobs: new BlobStore(join(freshDir('blobs'), 'b')), kit, diskBytes: 256 * 1024 * 1024 });
    assertImageDisk(img);
  }
});

test('hostile layers fail cleanly, with nothing written outside', async () => {
  const sentinel = join(root, `escaped-${process.pid}`);
  const cases: [TarEntrySpec[], RegExp][] = [
    [[{ path: `../../../../../..${sentinel}`, body: 'x' }], /climbs out of its root/],
    [[{ path: 'etc', type: 'SymbolicLink', linkpath: '/etc' }, { path: 'etc/cron.d/evil', body: '* * * * * root id\n' }], /through the symbolic link \/etc/],
    [[{ path: 'esc', type: 'SymbolicLink', linkpath: `../../../../..${root}` }, { path: `esc/escaped-${process.pid}`, body: 'x' }], /through the symbolic link \/esc/],
    [[{ path: 'shadow', type: 'Link', linkpath: '/etc/shadow' }], /is not a file in the image/],
    [[{ path: 'up', type: 'Link', linkpath: '../../etc/passwd' }], /climbs out of its root/],
  ];
  for (const [entries, message] of cases) {
    const dir = freshDir('hostile');
    layout(dir, [[{ path: 'ok', body: 'fine' }], entries]);
    const blobs = new BlobStore(join(dir, 'store'));
    await assert.rejects(imageTree(dir, readLayout(dir), blobs), (e: unknown) => e instanceof ImageError && e.code === 'invalid_argument' && message.test(e.message), String(message));
    assert.ok(readdirSync(blobs.dir).every((f) => /^sha256-[0-9a-f]{64}$/.test(f)), 'the store holds only names of its own');
  }
  assert.ok(!existsSync(sentinel), 'nothing was written outside');

  // Device nodes are left out, not created: the guest's /dev is a devtmpfs of its own.
  const devDir = freshDir('devices');
  layout(devDir, [[{ path: 'dev/sda', type: 'BlockDevice' }, { path: 'dev/mem', type: 'CharacterDevice' }, { path: 'dev/fd', type: 'SymbolicLink', linkpath: '/proc/self/fd' }]]);
  const { tree, warnings } = await imageTree(devDir, readLayout(devDir), new BlobStore(join(devDir, 'store')));
  assert.deepEqual([...tree.get(['dev'])!.children!.keys()], ['fd']);
  assert.deepEqual(warnings, ["2 device nodes were left out (the guest's /dev is its own): /dev/sda, /dev/mem"]);
  assert.ok(!existsSync('/etc/cron.d/evil'));

  // The whole path, from an uploaded archive: refused before any disk is made.
  const dir = freshDir('hostile-archive');
  layout(dir, [[{ path: 'etc', type: 'SymbolicLink', linkpath: '/etc' }, { path: 'etc/cron.d/evil', body: 'x' }, { path: `../..${sentinel}`, body: 'x' }]]);
  const archive = join(dir, 'image.tar');
  execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', `oci:${dir}:image`, `docker-archive:${archive}:evil:1`]);
  const img = join(freshDir('out'), 'rootfs.ext4');
  await assert.rejects(imageRootfs({ kind: 'archive', path: archive }, img, { workDir: freshDir('work'), blobs: new BlobStore(join(freshDir('blobs'), 'b')), kit, diskBytes: 256 * 1024 * 1024 }), ImageError);
  assert.ok(!existsSync(img) && !existsSync(sentinel) && !existsSync('/etc/cron.d/evil'));
});

test('a layer that does not match its digest is refused', async () => {
  const dir = freshDir('corrupt');
  layout(dir);
  const image = readLayout(dir);
  const blob = join(dir, 'blobs', 'sha256', image.layers[2]!.digest.slice(7));
  const bytes = readFileSync(blob);
  bytes[600] = bytes[600]! ^ 0xff; // inside new.txt's content: still a valid tar
  writeFileSync(blob, bytes);
  await assert.rejects(imageTree(dir, image, new BlobStore(join(dir, 'store'))), /does not match its digest/);
});

test('an image larger than its disk is refused before anything is written', async () => {
  const tree = new FileTree();
  const blobs = new BlobStore(join(freshDir('small'), 'b'));
  await addGuestKit(tree, blobs, kit);
  await assert.rejects(writeExt4(tree, blobs, join(root, 'small.ext4'), { sizeBytes: 16 * 1024 * 1024 }), /needs about \d+ MiB, more than the disk's 16 MiB/);
  assert.ok(!existsSync(join(root, 'small.ext4')));
});

test("vessel-init for the kit runs on the kit's busybox and starts the kit's agent", () => {
  const init = kitInit(readFileSync(join(GUEST_RECIPE_DIR, 'vessel-init'), 'utf8'));
  assert.ok(init.startsWith('#!/.vessel/bin/sh\n'));
  assert.match(init, /^export PATH=\/\.vessel\/bin:\/usr\/local\/sbin:/m);
  assert.match(init, /^exec \/\.vessel\/bin\/vessel-agent --channel/m);
  assert.doesNotMatch(init, /exec \/sbin\/vessel-agent/);
});

test("an image's own /.vessel cannot steer the kit elsewhere", async () => {
  const tree = new FileTree();
  tree.put(['usr', 'bin'], { kind: 'dir', mode: 0o755, uid: 0, gid: 0, mtime: 0, size: 0, digest: null, target: null }, 'usr/bin');
  tree.put(['.vessel'], { kind: 'symlink', mode: 0o777, uid: 0, gid: 0, mtime: 0, size: 0, digest: null, target: '/usr' }, '.vessel');
  await addGuestKit(tree, new BlobStore(join(freshDir('kit'), 'b')), kit);
  assert.equal(tree.get(['.vessel'])!.inode.kind, 'dir');
  assert.equal(tree.get(['usr', 'bin', 'busybox']), undefined, 'nothing of the kit landed where the link pointed');
  assert.equal(tree.get(['.vessel', 'bin', 'busybox'])!.inode.kind, 'file');
});
