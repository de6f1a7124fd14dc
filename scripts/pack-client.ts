/**
 * The SDK as an npm tarball that installs anywhere, even offline: client/package.json, its build
 * (client/dist, `npm run build:client`) and its dependencies, bundled (bundleDependencies). They
 * are copied from this repository's install, so the tarball carries the exact versions the tests
 * ran with, and `npm install ./vessel-sh-client-0.1.0.tgz` needs no registry at all. They are
 * small (openapi-fetch, eventsource-parser, and tar for client/node/ with its few dependencies);
 * bundled rather than inlined by a bundler, their declarations come along too, so a project's
 * type check resolves every type the SDK's declarations name. `ws` is an optional peer: only
 * Node 20 needs it (no global WebSocket there), and it is the project's choice to install it.
 *
 * The package is staged in dist/packages/client (an npm workspace would not do: `npm pack -w`
 * leaves out the dependencies it hoisted to the root), then packed:
 *
 *   npm run pack:client [-- DEST_DIR]      → DEST_DIR/vessel-sh-client-<version>.tgz
 */
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Compiled to dist/scripts/: two levels below the repository. */
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const CLIENT_DIR = join(REPO_ROOT, 'client');
export const STAGING_DIR = join(REPO_ROOT, 'dist/packages/client');

interface Manifest {
  name: string;
  version: string;
  dependencies?: Record<string, string>;
  bundleDependencies?: string[];
}

const manifest = (dir: string): Manifest => JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as Manifest;

/** Where Node finds package `name` from `fromDir`: the nearest node_modules up to the repository's. */
function installed(name: string, fromDir: string): string {
  for (let dir = fromDir; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dir === REPO_ROOT || dir === dirname(dir)) throw new Error(`${name} (needed from ${relative(REPO_ROOT, fromDir) || '.'}) is not installed: run npm ci`);
  }
}

/**
 * Copies `names` and everything they depend on from the repository's node_modules into
 * `stage`, each at the same path relative to the root: the layout npm resolved (hoisted, or
 * nested where versions differ) resolves the same way there.
 */
function copyDependencies(names: string[], fromDir: string, stage: string, copied = new Set<string>()): void {
  for (const name of names) {
    const source = installed(name, fromDir);
    const rel = relative(REPO_ROOT, source);
    if (copied.has(rel)) continue;
    copied.add(rel);
    const nested = join(source, 'node_modules');
    // Its own node_modules holds only what some package in it needs: copied as they are reached.
    cpSync(source, join(stage, rel), { recursive: true, filter: (path) => path !== nested && !path.startsWith(nested + sep) });
    copyDependencies(Object.keys(manifest(source).dependencies ?? {}), source, stage, copied);
  }
}

/** Assembles the package to pack in STAGING_DIR; returns it. */
export function stageClient(): string {
  if (!existsSync(join(CLIENT_DIR, 'dist/index.js'))) throw new Error('client/dist is not built: run npm run build:client');
  const pkg = manifest(CLIENT_DIR);
  const missing = Object.keys(pkg.dependencies ?? {}).filter((d) => !(pkg.bundleDependencies ?? []).includes(d));
  if (missing.length > 0) throw new Error(`client/package.json: ${missing.join(', ')} must be bundled too, or an offline install cannot resolve them`);
  rmSync(STAGING_DIR, { recursive: true, force: true });
  mkdirSync(STAGING_DIR, { recursive: true });
  for (const f of ['package.json', 'README.md', 'dist']) cpSync(join(CLIENT_DIR, f), join(STAGING_DIR, f), { recursive: true });
  // From the repository root: the client's dependencies are installed there (root package.json).
  copyDependencies(pkg.bundleDependencies ?? [], REPO_ROOT, STAGING_DIR);
  return STAGING_DIR;
}

/** npm: under npm, its own CLI through this Node; else the `npm` on PATH. */
export function npm(args: string[], opts: { cwd: string; env?: NodeJS.ProcessEnv }): { status: number; stdout: string; stderr: string } {
  const cli = process.env.npm_execpath;
  const [cmd, argv] = cli !== undefined && /npm-cli\.js$/.test(cli) ? [process.execPath, [cli, ...args]] : ['npm', args];
  const run = spawnSync(cmd, argv, { cwd: opts.cwd, env: opts.env ?? process.env, encoding: 'utf8' });
  return { status: run.status ?? 1, stdout: run.stdout, stderr: run.stderr };
}

/** Stages and packs the SDK into `destDir`; the tarball's path. */
export function packClient(destDir: string): string {
  const stage = stageClient();
  mkdirSync(destDir, { recursive: true });
  const packed = npm(['pack', '--json', '--pack-destination', destDir], { cwd: stage });
  if (packed.status !== 0) throw new Error(`npm pack failed:\n${packed.stdout}${packed.stderr}`);
  const [{ filename }] = JSON.parse(packed.stdout) as Array<{ filename: string }>;
  return join(destDir, filename!);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  console.log(packClient(resolve(process.argv[2] ?? process.cwd())));
}
