import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { BlobStore } from '../../src/templates/blob-store.js';
import { readBuildContext } from '../../src/templates/build-context.js';
import { emptyConfig, parseDockerfile, planBuild, type Step } from '../../src/templates/dockerfile.js';
import { baseKey, matchSources, stepKey } from '../../src/templates/step-keys.js';
import { tarOf, type TarEntrySpec } from '../support/tar-stream.js';

const BASE = baseKey({ kind: 'default', imageDigest: 'sha256:1111' });

/** Every step's key, in order, for a Dockerfile and a context. */
async function keys(dockerfile: string, files: TarEntrySpec[], buildArgs: Record<string, string> = {}): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-keys-'));
  try {
    const ctx = await readBuildContext(Readable.from([tarOf([{ path: 'Dockerfile', body: dockerfile }, ...files])]), { blobs: new BlobStore(join(dir, 'blobs')) });
    const plan = planBuild(parseDockerfile(ctx.dockerfile!), { buildArgs, baseConfigs: new Map([['debian:12', emptyConfig()]]) });
    const out: string[] = [];
    let parent = BASE;
    for (const step of plan.stages.at(-1)!.steps) {
      parent = stepKey(parent, step, step.kind === 'copy' ? { sources: matchSources(ctx.tree, step as Step & { kind: 'copy' }) } : {});
      out.push(parent);
    }
    return out;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const DOCKERFILE = 'FROM debian:12\nARG MODE=dev\nCOPY app/ /app/\nRUN make $MODE\nCOPY *.txt /docs/\nRUN echo done\n';
const FILES: TarEntrySpec[] = [{ path: 'app/main.c', body: 'int main(){}' }, { path: 'a.txt', body: 'a' }, { path: 'b.txt', body: 'b' }, { path: 'c.md', body: 'c' }];

test('the same build gives the same keys; a changed last step changes only the last key', async () => {
  const first = await keys(DOCKERFILE, FILES);
  assert.equal(first.length, 4);
  assert.equal(new Set(first).size, 4);
  assert.deepEqual(await keys(DOCKERFILE, FILES), first);
  const lastChanged = await keys(DOCKERFILE.replace('echo done', 'echo finished'), FILES);
  assert.deepEqual(lastChanged.slice(0, 3), first.slice(0, 3));
  assert.notEqual(lastChanged[3], first[3]);
});

test('what a step reads is in its key: files copied, build args; what it does not read is not', async () => {
  const first = await keys(DOCKERFILE, FILES);
  const mainChanged = await keys(DOCKERFILE, FILES.map((f) => (f.path === 'app/main.c' ? { ...f, body: 'int main(){return 1;}' } : f)));
  assert.notEqual(mainChanged[0], first[0], 'a copied file changed: its COPY and everything after');
  assert.notEqual(mainChanged[3], first[3]);
  const mdChanged = await keys(DOCKERFILE, FILES.map((f) => (f.path === 'c.md' ? { ...f, body: 'other' } : f)));
  assert.deepEqual(mdChanged, first, 'c.md is copied by no step');
  const txtChanged = await keys(DOCKERFILE, FILES.map((f) => (f.path === 'b.txt' ? { ...f, body: 'B' } : f)));
  assert.deepEqual(txtChanged.slice(0, 2), first.slice(0, 2), 'steps before the COPY that reads b.txt keep their keys');
  assert.notEqual(txtChanged[2], first[2]);
  const modeChanged = await keys(DOCKERFILE, FILES.map((f) => (f.path === 'app/main.c' ? { ...f, mode: 0o755 } : f)));
  assert.notEqual(modeChanged[0], first[0], 'a mode is part of what COPY makes');
  const prod = await keys(DOCKERFILE, FILES, { MODE: 'prod' });
  assert.equal(prod[0], first[0], 'the build arg is not read by the COPY');
  assert.notEqual(prod[1], first[1], 'it is in the RUN environment');
  const moved = await keys(DOCKERFILE.replace('FROM debian:12\n', 'FROM debian:12\n\n# a comment\n'), FILES);
  assert.deepEqual(moved, first, 'line numbers are not in keys');
});

test('a COPY source that matches nothing is an error on its line', async () => {
  await assert.rejects(keys('FROM debian:12\nCOPY missing.txt /x\n', FILES), /line 2: COPY missing.txt: no such file/);
  await assert.rejects(keys('FROM debian:12\nCOPY *.rs /x/\n', FILES), /line 2: COPY \*\.rs/);
});
