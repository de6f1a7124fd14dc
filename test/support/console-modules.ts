/**
 * The console's browser modules, loaded into Node for unit tests. The console is browser code that
 * tsc does not emit (console/tsconfig.json only type-checks), so esbuild bundles the exports a
 * test names into a temporary ES module first, as the console's build does.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { build } from 'esbuild';
import { REPO_ROOT } from './service.js';

/** `exports`: export lines relative to console/ ("export { href } from './router.js';"). */
export async function loadConsoleModules<T>(exports: string[]): Promise<T> {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-console-modules-'));
  try {
    const outfile = join(dir, 'modules.mjs');
    await build({
      stdin: { contents: exports.join('\n'), resolveDir: join(REPO_ROOT, 'console'), loader: 'ts' },
      bundle: true,
      format: 'esm',
      platform: 'neutral',
      outfile,
      tsconfig: join(REPO_ROOT, 'console/tsconfig.json'),
      logLevel: 'error',
    });
    return (await import(pathToFileURL(outfile).href)) as T;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
