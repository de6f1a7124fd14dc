/**
 * `npm run lint` (eslint with typescript-eslint's type-aware rules, eslint.config.js) is clean:
 * not one finding over src/, client/, console/, test/, bench/ and scripts/. Run with the tests so
 * that a finding fails them rather than piling up.
 *
 * Type-aware linting builds the TypeScript programs of the three tsconfigs, which costs about a
 * minute of CPU. The results are cached by file content in dist/.eslintcache, so a warm checkout
 * lints only the files that changed. The cache cannot see that a file's types changed because
 * another file did (an unchanged caller of a function that now returns a promise): a fresh
 * checkout, as CI's, has no cache and lints everything, and `npm run lint` never uses it.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Compiled to dist/test/unit/: three levels below the repository. */
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
const ESLINT = join(REPO_ROOT, 'node_modules/eslint/bin/eslint.js');

interface FileResult {
  filePath: string;
  messages: Array<{ ruleId: string | null; line: number; message: string }>;
}

function eslint(args: string[]): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [ESLINT, ...args], { cwd: REPO_ROOT, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 });
  if (r.error !== undefined) throw r.error;
  return r;
}

test('eslint finds nothing in the sources, the tests, the benches and the scripts', () => {
  const r = eslint(['--format', 'json', '--max-warnings', '0', '--cache', '--cache-strategy', 'content', '--cache-location', 'dist/.eslintcache', '.']);
  if (!r.stdout.startsWith('[')) assert.fail(`eslint failed (${r.status}):\n${r.stderr}`);
  const results = JSON.parse(r.stdout) as FileResult[];
  const findings = results.flatMap((f) => f.messages.map((m) => `${f.filePath.slice(REPO_ROOT.length + 1)}:${m.line} ${m.ruleId ?? 'parse'}: ${m.message}`));
  assert.deepEqual(findings, []);
  assert.equal(r.status, 0);
  // Every tree was really linted (a config whose globs stopped matching would pass on nothing).
  for (const tree of ['src/', 'client/', 'console/', 'test/', 'bench/', 'scripts/']) {
    assert.ok(results.some((f) => f.filePath.startsWith(join(REPO_ROOT, tree))), `nothing under ${tree} was linted`);
  }
  assert.ok(results.length > 300, `only ${results.length} files linted`);
});

test('the type-aware rules are the ones in force', () => {
  const r = eslint(['--print-config', 'src/api/app.ts']);
  assert.equal(r.status, 0, r.stderr);
  const { rules } = JSON.parse(r.stdout) as { rules: Record<string, unknown[]> };
  for (const rule of ['@typescript-eslint/no-floating-promises', '@typescript-eslint/no-misused-promises', '@typescript-eslint/no-unsafe-assignment', '@typescript-eslint/only-throw-error']) {
    assert.equal(rules[rule]?.[0], 2, `${rule} is not an error`);
  }
});
