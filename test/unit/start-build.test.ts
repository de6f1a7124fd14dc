/**
 * `npm start` builds only when a source is newer than the last build (scripts/build-stamp.ts,
 * scripts/start.ts), and `npm ci` (prepare) and `npm run build` write the stamp it compares with.
 * Over a temp tree with modification times set explicitly: no clock, no sleeping.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { BUILD_INPUTS, newestInput, stampPath, staleness, writeStamp } from '../../scripts/build-stamp.js';
import { start } from '../../scripts/start.js';
import { REPO_ROOT } from '../support/service.js';

const T = new Date('2026-01-01T00:00:00Z').getTime() / 1000;

/** A repository-like tree whose files all date from `T - 100` s, and a stamp from `T`. */
function tree(): { root: string; touch(path: string, at: number): void; done(): void } {
  const root = mkdtempSync(join(tmpdir(), 'vessel-stamp-'));
  const touch = (path: string, at: number) => {
    const full = join(root, path);
    mkdirSync(dirname(full), { recursive: true });
    writeFileSync(full, path, { flag: 'a' });
    utimesSync(full, at, at);
  };
  for (const f of ['src/cli/main.ts', 'client/index.ts', 'client/tsconfig.json', 'console/main.ts', 'scripts/build-console.ts', 'tsconfig.json', 'package.json', 'test/x.test.ts']) touch(f, T - 100);
  mkdirSync(join(root, 'dist'));
  writeStamp(root);
  utimesSync(stampPath(root), T, T);
  return { root, touch, done: () => rmSync(root, { recursive: true, force: true }) };
}

test('a build newer than every input is fresh; without a stamp it is to be built', () => {
  const t = tree();
  try {
    assert.equal(staleness(t.root), null);
    assert.equal(newestInput(t.root)?.mtimeMs, (T - 100) * 1000);
    rmSync(stampPath(t.root));
    assert.equal(staleness(t.root), 'no build yet');
  } finally {
    t.done();
  }
});

test('any input newer than the stamp makes the build stale, and names it', () => {
  for (const path of ['src/cli/main.ts', 'client/index.ts', 'client/tsconfig.json', 'console/views/new-view.ts', 'scripts/build-console.ts', 'tsconfig.json', 'package.json', 'package-lock.json']) {
    const t = tree();
    try {
      t.touch(path, T + 1);
      assert.equal(staleness(t.root), `${path} changed since the last build`);
    } finally {
      t.done();
    }
  }
});

test('what the build does not read does not make it stale: tests, docs, a workspace\'s node_modules', () => {
  const t = tree();
  try {
    for (const path of ['test/x.test.ts', 'docs/sdk.md', 'client/node_modules/ws/index.js', 'dist/src/cli/main.js']) t.touch(path, T + 50);
    assert.equal(staleness(t.root), null);
  } finally {
    t.done();
  }
});

test('start builds first when stale, then serves; when fresh it serves at once; a failed build serves nothing', async () => {
  const t = tree();
  try {
    const calls: string[] = [];
    const steps = (status: number) => ({
      build: () => {
        calls.push('build');
        writeStamp(t.root);
        utimesSync(stampPath(t.root), T + 10, T + 10);
        return status;
      },
      serve: async (args: string[]) => void calls.push(`serve ${args.join(' ')}`),
      log: (line: string) => calls.push(line),
    });
    assert.equal(await start(t.root, ['--role', 'all'], steps(0)), true);
    assert.deepEqual(calls.splice(0), ['serve --role all']);

    t.touch('src/cli/main.ts', T + 5);
    assert.equal(await start(t.root, [], steps(0)), true);
    assert.deepEqual(calls.splice(0), ['building first (src/cli/main.ts changed since the last build): npm run build:service', 'build', 'serve ']);
    assert.equal(staleness(t.root), null);

    t.touch('console/main.ts', T + 20);
    assert.equal(await start(t.root, [], steps(2)), false);
    assert.deepEqual(calls.splice(0), ['building first (console/main.ts changed since the last build): npm run build:service', 'build', 'the build failed (exit status 2)']);
  } finally {
    t.done();
  }
});

test('package.json: npm start runs the launcher; npm ci (prepare), npm run build and build:service write the stamp', () => {
  const { scripts } = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> };
  assert.match(scripts.start!, /node dist\/scripts\/start\.js$/);
  assert.doesNotMatch(scripts.start!, /(^|&& )tsc /, 'start compiles only through the launcher, when stale');
  // The stamp is written last, by the part of the build that a stale start runs again.
  assert.match(scripts['build:service']!, /^tsc -p \. --incremental --tsBuildInfoFile dist\/\.tsbuildinfo && .*&& node dist\/scripts\/build-stamp\.js$/);
  assert.match(scripts.build!, /&& npm run build:service$/);
  assert.equal(scripts.prepare, 'npm run build');
  // Every input is one the build reads: the service, the SDK, the console and their scripts and configs.
  assert.deepEqual([...BUILD_INPUTS].sort(), ['client', 'console', 'package-lock.json', 'package.json', 'scripts', 'src', 'tsconfig.json']);
});
