/**
 * Builds the web console (console/) into dist/console/, which the service serves at /console/
 * (src/api/console.ts). `npm ci` (prepare) and `npm start` run it, so a fresh clone serves a
 * console with no second server and no step of its own:
 *
 *   node dist/scripts/build-console.js
 *
 * esbuild bundles the console's TypeScript with the SDK's sources and xterm.js into one ES module,
 * and the stylesheets (xterm's included) into one file: a browser then makes two requests, and the
 * page needs no import map or module paths. esbuild rather than a larger bundler: one
 * dependency with no plugins to configure, typed options, and a build that takes a fraction of a
 * second, so `npm start` does not notice it. It does not type-check: `tsc -p console` does
 * (console/tsconfig.json, the browser's view: DOM, no Node types).
 *
 * Each output also gets .br and .gz beside it, which @fastify/static sends to browsers that
 * accept them (`preCompressed`): the bundle is mostly xterm.js and shrinks to about a quarter.
 */
import { copyFileSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { brotliCompressSync, gzipSync } from 'node:zlib';
import { build } from 'esbuild';

/** Compiled to dist/scripts/: two levels below the repository. */
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
const SOURCE = join(REPO_ROOT, 'console');
export const CONSOLE_OUT_DIR = join(REPO_ROOT, 'dist/console');

/** Served as they are. */
const STATIC_FILES = ['index.html', 'favicon.svg'];

/** Browsers with what the console uses (ES2022, ReadableStream bodies, AbortSignal.any in the SDK). */
const TARGETS = ['chrome116', 'firefox124', 'safari17.4', 'edge116'];

export async function buildConsole(outDir = CONSOLE_OUT_DIR): Promise<string[]> {
  rmSync(outDir, { recursive: true, force: true });
  mkdirSync(outDir, { recursive: true });
  const result = await build({
    absWorkingDir: REPO_ROOT,
    entryPoints: [join(SOURCE, 'main.ts'), join(SOURCE, 'console.css')],
    outdir: outDir,
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: TARGETS,
    minify: true,
    sourcemap: 'linked',
    // The SDK is resolved to its sources through console/tsconfig.json's paths (`vessel/client`).
    tsconfig: join(SOURCE, 'tsconfig.json'),
    legalComments: 'linked',
    logLevel: 'warning',
    metafile: true,
  });
  const copied = STATIC_FILES.map((name) => {
    copyFileSync(join(SOURCE, name), join(outDir, name));
    return join(outDir, name);
  });
  const outputs = [...Object.keys(result.metafile.outputs).map((path) => resolve(REPO_ROOT, path)), ...copied];
  for (const path of outputs.filter((p) => /\.(js|css|html|svg)$/.test(p))) {
    const bytes = readFileSync(path);
    writeFileSync(`${path}.br`, brotliCompressSync(bytes));
    writeFileSync(`${path}.gz`, gzipSync(bytes, { level: 9 }));
  }
  return outputs;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const outputs = await buildConsole();
  console.log(`console built into ${CONSOLE_OUT_DIR} (${outputs.length} files)`);
}
