/**
 * Whether dist/ is older than the sources it is built from, so that `npm start` builds only when
 * something changed (a `git pull`, an edit) rather than on every start: compiling was most of
 * the 15–25 s a start took. `npm run build:service` (the end of `npm run build`, and so of
 * `npm ci` through prepare) ends by writing the stamp:
 *
 *   node dist/scripts/build-stamp.js
 *
 * The check compares modification times, newest input against the stamp: a walk of a few hundred
 * files' stat, a few milliseconds, and no hashing. An input edited while a build runs may be
 * missed (the stamp is written at the end); the next edit or `npm run build` catches it.
 */
import { readdirSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** Compiled to dist/scripts/: two levels below the repository. */
export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');

/** What the build reads: the service, the SDK, the console, the build scripts, their configs. */
export const BUILD_INPUTS = ['src', 'client', 'console', 'scripts', 'tsconfig.json', 'package.json', 'package-lock.json'];
/** Directories under the inputs that the build does not read (a workspace's own install). */
const SKIPPED_DIRS = new Set(['node_modules', 'dist']);

export const stampPath = (root: string): string => join(root, 'dist', '.build-stamp');

/** The newest modification time (ms) of a file under `root`'s inputs, and which file; missing inputs are skipped. */
export function newestInput(root: string, inputs: readonly string[] = BUILD_INPUTS): { path: string; mtimeMs: number } | null {
  let newest: { path: string; mtimeMs: number } | null = null;
  const visit = (path: string) => {
    let st;
    try {
      st = statSync(path);
    } catch {
      return;
    }
    if (st.isDirectory()) {
      for (const entry of readdirSync(path, { withFileTypes: true })) {
        if (entry.isDirectory() && SKIPPED_DIRS.has(entry.name)) continue;
        visit(join(path, entry.name));
      }
    } else if (newest === null || st.mtimeMs > newest.mtimeMs) {
      newest = { path, mtimeMs: st.mtimeMs };
    }
  };
  for (const input of inputs) visit(join(root, input));
  return newest;
}

/** Why dist/ must be built again, or null when it is newer than every input. */
export function staleness(root: string, inputs: readonly string[] = BUILD_INPUTS): string | null {
  let stampMs: number;
  try {
    stampMs = statSync(stampPath(root)).mtimeMs;
  } catch {
    return 'no build yet';
  }
  const newest = newestInput(root, inputs);
  if (newest !== null && newest.mtimeMs > stampMs) return `${newest.path.slice(root.length + 1)} changed since the last build`;
  return null;
}

export function writeStamp(root: string): void {
  writeFileSync(stampPath(root), `built ${new Date().toISOString()}\n`);
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeStamp(REPO_ROOT);
}
