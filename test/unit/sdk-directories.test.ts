/**
 * Local directories as tar for Files.upload() and download() (client/node/directories.ts), without
 * a service: a round trip keeps contents, modes and links, and an archive with an entry that
 * climbs out of its target fails without writing there.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmod, mkdir, mkdtemp, readFile, readlink, stat, symlink, writeFile, access } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Header } from 'tar';
import { localDirectories } from '../../client/node/directories.js';

const streamOf = async (chunks: AsyncIterable<Uint8Array>): Promise<ReadableStream<Uint8Array>> => {
  const parts: Buffer[] = [];
  for await (const c of chunks) parts.push(Buffer.from(c));
  return new Blob([Buffer.concat(parts)]).stream();
};

test('pack then extract keeps files, nested directories, modes and symbolic links', async () => {
  const root = await mkdtemp(join(tmpdir(), 'vessel-dirs-'));
  const src = join(root, 'src');
  await mkdir(join(src, 'a/b'), { recursive: true });
  await writeFile(join(src, 'a/b/data.bin'), new Uint8Array([0, 1, 255]));
  await writeFile(join(src, 'tool.sh'), '#!/bin/sh\n');
  await chmod(join(src, 'tool.sh'), 0o750);
  await symlink('tool.sh', join(src, 'link'));
  const dest = join(root, 'dest/new');
  await localDirectories.extract(await streamOf(await localDirectories.pack(src)), dest, undefined);
  assert.deepEqual([...(await readFile(join(dest, 'a/b/data.bin')))], [0, 1, 255]);
  assert.equal((await stat(join(dest, 'tool.sh'))).mode & 0o777, 0o750);
  assert.equal(await readlink(join(dest, 'link')), 'tool.sh');
});

test('packing what is not a directory fails at once', async () => {
  await assert.rejects(localDirectories.pack(join(tmpdir(), 'no-such-dir-for-vessel')), { code: 'ENOENT' });
});

test('an entry that climbs out of the target directory fails the extraction and writes nothing there', async () => {
  const root = await mkdtemp(join(tmpdir(), 'vessel-dirs-'));
  const header = Buffer.alloc(512);
  new Header({ path: '../escaped.txt', mode: 0o644, size: 4, type: 'File', mtime: new Date(0) }).encode(header, 0);
  const body = Buffer.alloc(512);
  body.write('evil');
  const archive = new Blob([header, body, Buffer.alloc(1024)]).stream();
  await assert.rejects(localDirectories.extract(archive, join(root, 'target'), undefined));
  await assert.rejects(access(join(root, 'escaped.txt')), { code: 'ENOENT' });
});
