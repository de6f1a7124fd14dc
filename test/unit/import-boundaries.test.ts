/**
 * The import boundaries of docs/architecture.md hold: dependency-cruiser, with the rules in
 * .dependency-cruiser.cjs, finds no violation in the TypeScript sources of src/, client/ and
 * console/ (the same check as `npm run lint:boundaries`). A fixture tree that breaks every rule
 * proves each rule catches what it forbids, so a rule that stopped matching (a renamed folder, a
 * resolver that no longer maps './x.js' to x.ts) fails here rather than passing silently.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { ICruiseResult } from 'dependency-cruiser';

/** Compiled to dist/test/unit/: three levels below the repository. */
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const CONFIG = join(REPO_ROOT, '.dependency-cruiser.cjs');
const DEPCRUISE = join(REPO_ROOT, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs');

function cruise(cwd: string, paths: string[]): { result: ICruiseResult } {
  const r = spawnSync(process.execPath, [DEPCRUISE, '--config', CONFIG, '--output-type', 'json', ...paths], { cwd, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.error !== undefined) throw r.error;
  if (!r.stdout.startsWith('{')) throw new Error(`depcruise failed (${r.status}):\n${r.stderr}`);
  return { result: JSON.parse(r.stdout) as ICruiseResult };
}

const describe = (result: ICruiseResult): string[] => result.summary.violations.map((v) => `${v.rule.name}: ${v.from} -> ${v.to}`);

test('src/, client/ and console/ keep the import boundaries', () => {
  const { result } = cruise(REPO_ROOT, ['src', 'client', 'console']);
  assert.deepEqual(describe(result), []);
  // The sources were really cruised and their './x.js' imports resolved to the .ts files:
  // otherwise an empty graph would pass every rule.
  assert.ok(result.summary.totalCruised > 150, `only ${result.summary.totalCruised} modules cruised`);
  const rows = result.modules.find((m) => m.source === 'src/store/rows.ts');
  assert.ok(rows?.dependencies.some((d) => d.resolved.startsWith('src/core/') && !d.couldNotResolve), 'src/store/rows.ts -> src/core/ not resolved');
  for (const source of ['src/api/app.ts', 'client/index.ts', 'console/main.ts']) assert.ok(result.modules.some((m) => m.source === source), `${source} not cruised`);
});

const fixture = mkdtempSync(join(tmpdir(), 'vessel-boundaries-'));
after(() => rmSync(fixture, { recursive: true, force: true }));

function put(path: string, text: string): void {
  mkdirSync(dirname(join(fixture, path)), { recursive: true });
  writeFileSync(join(fixture, path), text);
}

test('every rule catches a violation of its own', () => {
  put('tsconfig.json', JSON.stringify({ compilerOptions: { module: 'NodeNext', moduleResolution: 'NodeNext', strict: true }, include: ['src', 'client', 'console'] }));
  put('src/core/ok.ts', 'export const ok = 1;\n');
  put('src/core/leak.ts', "import { x } from '../vm/driver.js';\nimport { c } from '../cluster/fleet.js';\nexport const leak = x + c;\n");
  put('src/cluster/fleet.ts', "import { ok } from '../core/ok.js';\nexport const c = ok;\n");
  put('src/vm/driver.ts', "import { r } from '../api/route.js';\nimport { y } from './own.js';\nimport { ok } from '../core/ok.js';\nexport const x = r + y + ok;\n");
  put('src/vm/own.ts', 'export const y = 1;\n');
  put('src/api/route.ts', "import type { S } from '../store/db.js';\nimport { c } from '../cluster/fleet.js';\nexport const r: S = c;\n");
  // A cycle inside one folder, where no folder rule sees it; type-only imports count.
  put('src/core/one.ts', "import type { Two } from './two.js';\nexport type One = { two?: Two };\n");
  put('src/core/two.ts', "import type { One } from './one.js';\nexport type Two = { one?: One };\n");
  put('src/store/db.ts', "import { ok } from '../core/ok.js';\nexport type S = number;\nexport const s: S = ok;\n");
  put('client/sdk.ts', "import { ok } from '../src/core/ok.js';\nexport const sdk = ok;\n");
  put('console/main.ts', "import { sdk } from '../client/sdk.js';\nexport const main = sdk;\n");

  const { result } = cruise(fixture, ['src', 'client', 'console']);
  assert.deepEqual(describe(result).sort(), [
    'adapters-import-only-core-and-platform: src/vm/driver.ts -> src/api/route.ts',
    'api-does-not-import-cluster: src/api/route.ts -> src/cluster/fleet.ts',
    'api-reaches-adapters-through-core: src/api/route.ts -> src/store/db.ts',
    'core-does-not-import-cluster: src/core/leak.ts -> src/cluster/fleet.ts',
    'core-imports-no-adapter: src/core/leak.ts -> src/cluster/fleet.ts',
    'core-imports-no-adapter: src/core/leak.ts -> src/vm/driver.ts',
    'no-import-cycle: src/core/one.ts -> src/core/two.ts',
    'sdk-and-console-import-nothing-from-src: client/sdk.ts -> src/core/ok.ts',
  ]);
  // `npm run lint:boundaries` (the default reporter) fails on them; the JSON reporter exits 0.
  const cli = spawnSync(process.execPath, [DEPCRUISE, '--config', CONFIG, 'src', 'client', 'console'], { cwd: fixture, encoding: 'utf8' });
  assert.notEqual(cli.status, 0, `depcruise exited ${cli.status} on violations:\n${cli.stdout}`);
});
