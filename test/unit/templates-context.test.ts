import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { BlobStore } from '../../src/templates/blob-store.js';
import { ContextError, readBuildContext, type ReadContextOptions } from '../../src/templates/build-context.js';
import { Dockerignore, DockerignoreError, goClean } from '../../src/templates/dockerignore.js';
import { treeDigest } from '../../src/templates/file-tree.js';
import { tarOf, type TarEntrySpec } from '../support/tar-stream.js';

const ignores = (patterns: string, path: string) => Dockerignore.parse(patterns).ignores(path);

test('.dockerignore patterns match as Docker matches them', () => {
  const cases: [string, string, boolean][] = [
    ['*.md', 'README.md', true],
    ['*.md', 'docs/a.md', false],
    ['**/*.md', 'docs/a.md', true],
    ['**/*.md', 'a.md', true],
    ['docs', 'docs/a/b.txt', true],
    ['/docs', 'docs/x', true],
    ['docs/', 'docs/x', true],
    ['./docs', 'docs/x', true],
    ['*\n!keep', 'keep', false],
    ['*\n!keep', 'other', true],
    ['docs\n!docs/keep.md', 'docs/keep.md', false],
    ['docs\n!docs/keep.md', 'docs/other.md', true],
    ['a?c', 'abc', true],
    ['a?c', 'a/c', false],
    ['a[b-d]c', 'acc', true],
    ['a[^b]c', 'abc', false],
    ['a[^b]c', 'axc', true],
    ['a[!b]c', 'a!c', true],
    ['a\\*c', 'a*c', true],
    ['a\\*c', 'abc', false],
    ['**', 'x/y', true],
    ['x/**/y', 'x/y', true],
    ['x/**/y', 'x/a/b/y', true],
    ['x/**', 'x', false],
    ['x/**', 'x/y', true],
    ['#comment', '#comment', false],
    ['  foo  ', 'foo', true],
    ['foo/../bar', 'bar', true],
    ['*/temp*', 'somedir/temporary.txt', true],
    ['*.go\n!main.go\nmain.go', 'main.go', true],
    ['.git', '.git/HEAD', true],
    ['*', '.hidden', true],
    ['**/node_modules', 'a/b/node_modules/x', true],
    ['a/*/c', 'a/b/c/d', true],
    ['a*', 'b/a1', false],
    ['**foo', 'barfoo', true],
    ['\uFEFFbom', 'bom', true],
    ['crlf\r\n', 'crlf', true],
  ];
  for (const [patterns, path, want] of cases) assert.equal(ignores(patterns, path), want, `${JSON.stringify(patterns)} against ${path}`);
  assert.equal(goClean('a//b/./c/..'), 'a/b');
  assert.equal(goClean('../a'), '../a');
});

test('bad patterns are refused with their line', () => {
  assert.throws(() => Dockerignore.parse('ok\n[abc'), (e: unknown) => e instanceof DockerignoreError && /line 2: .*unclosed \[/.test(e.message));
  assert.throws(() => Dockerignore.parse('a\\'), /ends with an escape/);
  assert.throws(() => Dockerignore.parse('!'), /'!' alone/);
  assert.throws(() => Dockerignore.parse('[z-a]'), /runs backwards/);
});

test('a pattern that makes a backtracking matcher take minutes is matched in one pass', () => {
  // @balena/dockerignore took 35 s for the first of these (eight **), against one path.
  const path = `${Array(40).fill('a').join('/')}/y`;
  assert.equal(ignores(`${Array(16).fill('**').join('/')}/x`, path), false);
  assert.equal(ignores(`${'*a'.repeat(16)}b`, 'a'.repeat(60)), false);
  assert.equal(ignores(`${Array(16).fill('**').join('/')}/y`, path), true);
});

const withStore = async (fn: (blobs: BlobStore, dir: string) => Promise<void>) => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-ctx-'));
  try {
    await fn(new BlobStore(join(dir, 'blobs')), dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
};

const read = (entries: TarEntrySpec[], opts: Omit<ReadContextOptions, 'blobs'> & { gzip?: boolean }, blobs: BlobStore) =>
  readBuildContext(Readable.from([tarOf(entries, { gzip: opts.gzip })]), { ...opts, blobs });

test('a context: files, directories, links, the Dockerfile, and .dockerignore applied', async () => {
  await withStore(async (blobs) => {
    const ctx = await read([
      { path: 'Dockerfile', body: 'FROM debian:12\nCOPY . /app\n' },
      { path: '.dockerignore', body: '*.log\nnode_modules\nsecrets\n!secrets/public.pem\n' },
      { path: 'src/', type: 'Directory' },
      { path: 'src/main.py', body: 'print(1)\n', mode: 0o755 },
      { path: 'src/link', type: 'SymbolicLink', linkpath: '/etc/passwd' },
      { path: 'src/hard', type: 'Link', linkpath: 'src/main.py' },
      { path: 'debug.log', body: 'x'.repeat(1000) },
      { path: 'node_modules/a/index.js', body: 'module.exports = 1' },
      { path: 'secrets/key.pem', body: 'private' },
      { path: 'secrets/public.pem', body: 'public' },
      { path: `deep/${'d/'.repeat(60)}file`, body: 'deep' },
    ], { gzip: true }, blobs);
    assert.equal(ctx.dockerfile, 'FROM debian:12\nCOPY . /app\n');
    const paths = [...ctx.tree.walk()].map(([p]) => p);
    assert.ok(paths.includes('/src/main.py'));
    assert.ok(paths.includes('/secrets/public.pem'), 'brought back by !');
    assert.ok(!paths.includes('/secrets/key.pem'));
    assert.ok(!paths.includes('/debug.log'));
    assert.ok(!paths.some((p) => p.startsWith('/node_modules')));
    assert.ok(paths.includes(`/deep/${'d/'.repeat(60)}file`), 'a path longer than a classic tar header, through PAX');
    assert.equal(ctx.ignored, 3, 'debug.log, node_modules/a/index.js and secrets/key.pem');
    const main = ctx.tree.get(['src', 'main.py'])!.inode;
    assert.equal(main.mode, 0o755);
    assert.deepEqual(ctx.tree.get(['src', 'link'])!.inode, { ...ctx.tree.get(['src', 'link'])!.inode, kind: 'symlink', target: '/etc/passwd' }, 'a link is data, never followed');
    assert.equal(ctx.tree.get(['src', 'hard'])!.inode.digest, main.digest);
    assert.equal(blobs.read(main.digest!).toString(), 'print(1)\n');
    assert.equal(readdirSync(blobs.dir).length, new Set([...ctx.tree.walk()].map(([, n]) => n.inode.digest).filter((d) => d !== null)).size, 'ignored contents are not kept');
  });
});

test('the subtree digest covers contents and modes, not times', async () => {
  await withStore(async (blobs) => {
    const a = await read([{ path: 'Dockerfile', body: 'FROM x' }, { path: 'app/a', body: '1' }], {}, blobs);
    const b = await read([{ path: 'Dockerfile', body: 'FROM x' }, { path: 'app/a', body: '1' }], {}, blobs);
    const c = await read([{ path: 'Dockerfile', body: 'FROM x' }, { path: 'app/a', body: '2' }], {}, blobs);
    const d = await read([{ path: 'Dockerfile', body: 'FROM x' }, { path: 'app/a', body: '1', mode: 0o600 }], {}, blobs);
    const digest = (ctx: typeof a) => treeDigest(ctx.tree.get(['app'])!);
    assert.equal(digest(a), digest(b));
    assert.notEqual(digest(a), digest(c));
    assert.notEqual(digest(a), digest(d));
  });
});

test('hostile contexts are refused, naming the entry, and nothing is written under their names', async () => {
  await withStore(async (blobs, dir) => {
    const refused = async (entries: TarEntrySpec[], message: RegExp, opts: Omit<ReadContextOptions, 'blobs'> = {}) =>
      assert.rejects(read(entries, opts, blobs), (e: unknown) => e instanceof ContextError && e.code === 'invalid_argument' && message.test(e.message));
    await refused([{ path: '../escape', body: 'x' }], /climbs out of its root/);
    await refused([{ path: 'a/../../escape', body: 'x' }], /climbs out of its root/);
    await refused([{ path: 'dev/sda', type: 'BlockDevice' }], /dev\/sda is a block device/);
    await refused([{ path: 'null', type: 'CharacterDevice' }], /character device/);
    await refused([{ path: 'etc', type: 'SymbolicLink', linkpath: '/etc' }, { path: 'etc/cron.d/x', body: 'evil' }], /through the symbolic link \/etc/);
    await refused([{ path: 'hard', type: 'Link', linkpath: '/etc/shadow' }], /not a file earlier in the stream/);
    await refused([{ path: 'a', body: 'x' }, { path: 'a/b', body: 'y' }], /not a directory/);
    await refused([{ path: 'x'.repeat(300), body: 'x' }], /longer than 255 bytes/);
    await refused([{ path: 'line\nbreak', body: 'x' }], /line break/);
    await refused([{ path: 'Dockerfile', body: 'x' }, { path: 'b', body: 'y' }, { path: 'c', body: 'z' }], /more than 2 entries/, { limits: { maxEntries: 2 } });
    await refused([{ path: 'Dockerfile', body: 'x'.repeat(100) }], /more than 99 bytes/, { limits: { maxBytes: 99 } });
    await refused([{ path: 'other', body: 'x' }], /no Dockerfile at Dockerfile/);
    await assert.rejects(readBuildContext(Readable.from([Buffer.from('this is not a tar stream at all, just text'.repeat(20))]), { blobs }), ContextError);
    const root = readdirSync(dir);
    assert.deepEqual(root, ['blobs'], 'nothing but the store was written');
    assert.ok(readdirSync(blobs.dir).every((f) => /^(sha256-[0-9a-f]{64})$/.test(f)), 'the store holds only names of its own');
  });
});

test('a tar bomb stops at a limit, not at its end', async () => {
  await withStore(async (blobs) => {
    // 64 MiB of zeros in about 64 KiB of gzip: node-tar's own ratio check (1000:1) stops it.
    const bomb = tarOf([{ path: 'Dockerfile', body: 'FROM x' }, { path: 'zeros', body: Buffer.alloc(64 * 1024 * 1024) }], { gzip: true });
    assert.ok(bomb.length < 256 * 1024);
    await assert.rejects(readBuildContext(Readable.from([bomb]), { blobs }), (e: unknown) => e instanceof ContextError && /decompression ratio/.test(e.message));
    // Data that compresses less stops at our byte limit, as soon as the entry's header says it would pass it.
    const big = tarOf([{ path: 'Dockerfile', body: 'FROM x' }, { path: 'random', body: randomBytes(2 * 1024 * 1024) }], { gzip: true });
    await assert.rejects(readBuildContext(Readable.from([big]), { blobs, limits: { maxBytes: 1024 * 1024 } }), /more than 1048576 bytes/);
    assert.deepEqual(readdirSync(blobs.dir).filter((f) => f.startsWith('tmp-')), [], 'no partial file is left');
  });
});
