/**
 * The envd protocol's TypeScript (src/e2b/gen/) is what buf and protoc-gen-es make of
 * src/e2b/proto/ now: a .proto edited without `npm run generate:e2b-protocol` fails here.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const E2B = join(REPO_ROOT, 'src/e2b');

async function filesUnder(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true });
  return entries.filter((e) => e.isFile()).map((e) => relative(dir, join(e.parentPath, e.name))).sort();
}

test('src/e2b/gen is generated from src/e2b/proto as it is', async () => {
  const out = await mkdtemp(join(tmpdir(), 'vessel-e2b-gen-'));
  try {
    const bin = join(REPO_ROOT, 'node_modules/.bin');
    await promisify(execFile)(join(bin, 'buf'), ['generate', '--output', out], { cwd: E2B, env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ''}` } });
    const made = await filesUnder(join(out, 'gen'));
    assert.deepEqual(await filesUnder(join(E2B, 'gen')), made);
    assert.ok(made.length > 0);
    for (const file of made) {
      assert.equal(await readFile(join(E2B, 'gen', file), 'utf8'), await readFile(join(out, 'gen', file), 'utf8'), `${file} is not what the .proto makes: npm run generate:e2b-protocol`);
    }
  } finally {
    await rm(out, { recursive: true, force: true });
  }
});
