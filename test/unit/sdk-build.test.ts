/**
 * What keeps the SDK what it claims to be: its types are those of the served document (not
 * stale), it builds for a browser (no Node in its core), it imports nothing of the service, the
 * package exports it as `vessel/client`, and docs/sdk.md shows the examples that the VM test runs.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { GENERATED_TYPES_PATH, generateClientTypes } from '../../scripts/generate-client-types.js';
import { REPO_ROOT } from '../support/service.js';

const CLIENT = join(REPO_ROOT, 'client');

const sourcesUnder = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => join(e.parentPath, e.name));

test('client/generated/openapi.ts is what the served document generates (else: npm run generate:client)', async () => {
  const committed = readFileSync(GENERATED_TYPES_PATH, 'utf8');
  assert.ok(committed === (await generateClientTypes()), 'the generated types are stale: run `npm run generate:client` and commit the result');
});

test('the SDK builds for a browser: its core type-checks without Node types (client/tsconfig.json)', () => {
  const tsc = spawnSync(process.execPath, [join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', CLIENT, '--noEmit'], { encoding: 'utf8' });
  assert.equal(tsc.status, 0, tsc.stdout + tsc.stderr);
});

test('the SDK imports nothing from outside client/ but packages', () => {
  for (const file of sourcesUnder(CLIENT)) {
    for (const [, specifier] of readFileSync(file, 'utf8').matchAll(/(?:from|import)\s*\(?\s*'([^']+)'/g)) {
      if (!specifier!.startsWith('.')) continue;
      const target = relative(CLIENT, resolve(dirname(file), specifier!));
      assert.ok(!target.startsWith('..'), `${relative(REPO_ROOT, file)} imports ${specifier}`);
    }
  }
});

test('the package exports the SDK as vessel/client, with its types', async () => {
  const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { exports: Record<string, { types: string; default: string }> };
  assert.deepEqual(pkg.exports['./client'], { types: './dist/client/index.d.ts', default: './dist/client/index.js' });
  const name = 'vessel/client'; // a variable: resolved by Node through the exports, not by tsc
  const sdk = (await import(name)) as typeof import('../../client/index.js');
  assert.equal(sdk.Vessel, (await import('../../client/index.js')).Vessel);
});

test('every example in docs/sdk.md is, word for word, a file under examples/sdk that test/vm/sdk.test.ts runs', () => {
  const docs = readFileSync(join(REPO_ROOT, 'docs/sdk.md'), 'utf8');
  const shown = [...docs.matchAll(/<!-- example: (\S+) -->\n```ts\n([\s\S]*?)```\n/g)];
  const files = readdirSync(join(REPO_ROOT, 'examples/sdk')).filter((f) => f.endsWith('.ts'));
  assert.deepEqual(shown.map((m) => m[1]).sort(), files.map((f) => `examples/sdk/${f}`).sort());
  for (const [, path, code] of shown) assert.equal(code, readFileSync(join(REPO_ROOT, path!), 'utf8'), `${path} as docs/sdk.md shows it`);
  const vmTest = readFileSync(join(REPO_ROOT, 'test/vm/sdk.test.ts'), 'utf8');
  for (const f of files.filter((f) => f !== 'connect.ts')) assert.ok(vmTest.includes(`'${f.replace(/\.ts$/, '')}'`), `test/vm/sdk.test.ts runs ${f}`);
});
