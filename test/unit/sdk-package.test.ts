/**
 * The SDK as a package of its own (client/package.json, @vessel-sh/client): what it is made of,
 * and that its tarball installs into an empty project with no network (no registry, an empty
 * npm cache), where a script imports it by name and talks to a real API on loopback and a type
 * check finds its declarations and what they name. It builds client/dist first, as
 * `npm run build:client` does.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { npm, packClient } from '../../scripts/pack-client.js';
import { apiHarness } from '../support/api-harness.js';
import { REPO_ROOT } from '../support/service.js';

const CLIENT = join(REPO_ROOT, 'client');
const execFileAsync = promisify(execFile);

interface Manifest {
  name: string;
  version: string;
  type: string;
  private?: boolean;
  exports: Record<string, unknown>;
  files: string[];
  dependencies: Record<string, string>;
  bundleDependencies: string[];
  peerDependencies: Record<string, string>;
  peerDependenciesMeta: Record<string, { optional?: boolean }>;
}
const clientManifest = (): Manifest => JSON.parse(readFileSync(join(CLIENT, 'package.json'), 'utf8')) as Manifest;

test('client/package.json: a public ESM package with its types, whose dependencies are what its sources import, and bundled', () => {
  const pkg = clientManifest();
  assert.equal(pkg.name, '@vessel-sh/client');
  assert.match(pkg.version, /^\d+\.\d+\.\d+/);
  assert.equal(pkg.type, 'module');
  assert.notEqual(pkg.private, true);
  assert.deepEqual(pkg.exports['.'], { types: './dist/index.d.ts', default: './dist/index.js' });

  // Every package the SDK's sources import, statically or by a constant (`ws`, loaded on Node 20 only).
  const imported = new Set<string>();
  for (const entry of readdirSync(CLIENT, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.ts') || /(^|\/)(dist|node_modules)(\/|$)/.test(entry.parentPath.slice(CLIENT.length))) continue;
    const source = readFileSync(join(entry.parentPath, entry.name), 'utf8');
    for (const [, spec] of source.matchAll(/(?:from|import)\s*\(?\s*'([^'.][^']*)'/g)) imported.add(spec!.split('/').slice(0, spec!.startsWith('@') ? 2 : 1).join('/'));
    for (const [, spec] of source.matchAll(/const \w+_PACKAGE = '([^']+)'/g)) imported.add(spec!);
  }
  const packages = [...imported].filter((s) => !s.startsWith('node:')).sort();
  assert.deepEqual(packages, [...Object.keys(pkg.dependencies), ...Object.keys(pkg.peerDependencies)].sort());
  assert.deepEqual([...pkg.bundleDependencies].sort(), Object.keys(pkg.dependencies).sort(), 'an offline install resolves only what the tarball carries');
  assert.deepEqual(Object.keys(pkg.peerDependencies), ['ws']);
  assert.equal(pkg.peerDependenciesMeta.ws?.optional, true);

  // The same ranges as the service's own install, which the bundled copies come from.
  const root = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  for (const [name, range] of Object.entries(pkg.dependencies)) assert.equal(range, root.dependencies[name], name);
});

test('its tarball installs into an empty project offline; the project imports it by name, uses it against a real API, and type-checks with it', { timeout: 600_000 }, async () => {
  // The package as the sources are now (npm run build:client), not as npm ci last built it.
  const build = spawnSync(process.execPath, [join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', join(CLIENT, 'tsconfig.package.json')], { encoding: 'utf8' });
  assert.equal(build.status, 0, build.stdout + build.stderr);
  const work = mkdtempSync(join(tmpdir(), 'vessel-sdk-pkg-'));
  const h = await apiHarness();
  try {
    const tarball = packClient(join(work, 'pack'));
    const listed = spawnSync('tar', ['-tzf', tarball], { encoding: 'utf8' }).stdout.split('\n');
    const version = clientManifest().version;
    assert.ok(tarball.endsWith(`vessel-sh-client-${version}.tgz`), tarball);
    for (const file of ['package/package.json', 'package/README.md', 'package/dist/index.js', 'package/dist/index.d.ts', 'package/dist/node/directories.js', 'package/node_modules/openapi-fetch/package.json', 'package/node_modules/eventsource-parser/package.json', 'package/node_modules/tar/package.json']) {
      assert.ok(listed.includes(file), `${file} is in the tarball`);
    }
    // Nothing of the service: no server code, no server dependency.
    for (const path of listed) assert.doesNotMatch(path, /^package\/(dist\/(src|test|console)\/|node_modules\/(fastify|better-sqlite3|pg|pino|@fastify)\/)/, path);

    // An empty project, and npm with no way to reach any registry: an empty cache, an address nothing listens on, offline.
    const project = join(work, 'project');
    mkdirSync(project);
    writeFileSync(join(project, 'package.json'), JSON.stringify({ name: 'uses-vessel', version: '1.0.0', private: true, type: 'module' }));
    const env = {
      ...process.env,
      npm_config_offline: 'true',
      npm_config_registry: 'http://127.0.0.1:9/',
      npm_config_cache: join(work, 'empty-npm-cache'),
      npm_config_update_notifier: 'false',
    };
    const install = npm(['install', '--offline', '--no-audit', '--no-fund', tarball], { cwd: project, env });
    assert.equal(install.status, 0, install.stdout + install.stderr);
    const installed = JSON.parse(readFileSync(join(project, 'node_modules/@vessel-sh/client/package.json'), 'utf8')) as { version: string };
    assert.equal(installed.version, version);
    assert.ok(!existsSync(join(project, 'node_modules/ws')), 'ws is an optional peer: not installed for the project');

    // The project's own script: the package by its name, a client, calls to the API.
    await h.app.listen({ host: '127.0.0.1', port: 0 });
    const { port } = h.app.server.address() as { port: number };
    writeFileSync(
      join(project, 'use.mjs'),
      `import { Vessel, VesselError } from '@vessel-sh/client';
const vessel = new Vessel({ url: process.env.VESSEL_URL, token: process.env.VESSEL_TOKEN });
const created = await vessel.secrets.create({ name: 'from-a-project', value: 'not shown' });
const names = (await vessel.secrets.list().toArray()).map((s) => s.display_name);
let refused;
try {
  await new Vessel({ url: process.env.VESSEL_URL, token: 'vsl_wrong', retry: { maxRetries: 0 } }).secrets.list().toArray();
} catch (err) {
  refused = err instanceof VesselError ? err.code : String(err);
}
console.log(JSON.stringify({ created: created.display_name, names, refused, resolved: import.meta.resolve('@vessel-sh/client') }));
`,
    );
    // Not spawnSync: the API answers from this process's event loop.
    const run = await execFileAsync(process.execPath, ['use.mjs'], { cwd: project, encoding: 'utf8', env: { ...process.env, VESSEL_URL: `http://127.0.0.1:${port}`, VESSEL_TOKEN: h.admin } });
    const out = JSON.parse(run.stdout) as { created: string; names: string[]; refused: string; resolved: string };
    assert.equal(out.created, 'from-a-project');
    assert.deepEqual(out.names, ['from-a-project']);
    assert.equal(out.refused, 'unauthenticated');
    assert.ok(out.resolved.startsWith(`file://${join(project, 'node_modules/@vessel-sh/client/')}`), out.resolved);

    // Its declarations: a strict check with the libraries' own declarations checked too
    // (skipLibCheck off), which fails if any type the SDK names does not resolve in the project.
    writeFileSync(
      join(project, 'check.ts'),
      `import { Vessel, VesselError, type Runtime, type ExecResult } from '@vessel-sh/client';
export async function run(vessel: Vessel): Promise<number> {
  const rt: Runtime = await vessel.runtimes.create({ display_name: 'typed', resources: { vcpus: 1, limits: { memory_mib: 512 } } });
  const result: ExecResult = await rt.exec('true');
  // @ts-expect-error display_name is a string: the types are real, not any
  await vessel.runtimes.create({ display_name: 42 });
  return result.exit_code;
}
export const isMissing = (err: unknown): boolean => err instanceof VesselError && err.code === 'not_found';
`,
    );
    writeFileSync(
      join(project, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: { strict: true, target: 'ES2022', module: 'NodeNext', moduleResolution: 'NodeNext', lib: ['ES2022', 'DOM', 'DOM.Iterable', 'DOM.AsyncIterable'], types: [], noEmit: true, skipLibCheck: false },
        files: ['check.ts'],
      }),
    );
    const tsc = spawnSync(process.execPath, [join(REPO_ROOT, 'node_modules/typescript/bin/tsc'), '-p', project], { cwd: project, encoding: 'utf8' });
    assert.equal(tsc.status, 0, tsc.stdout + tsc.stderr);
  } finally {
    await h.close();
    rmSync(work, { recursive: true, force: true });
  }
});
