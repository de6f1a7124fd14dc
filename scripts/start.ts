/**
 * `npm start`: the built service, built again first only if its sources are newer than the last
 * build (scripts/build-stamp.ts). Then it runs in this process (`vessel serve` and the arguments
 * given), so signals reach the service itself.
 *
 * A stale build is rebuilt with `npm run build:service`: what serving needs (the service, and the
 * console bundled), the steps the old `npm start` ran every time. The SDK's package and the
 * type checks of the client and console alone are left to `npm run build`: they would double a
 * start that has to build, and the service does not run them.
 *
 *   node dist/scripts/start.js [serve options]
 */
import { spawnSync } from 'node:child_process';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { REPO_ROOT, staleness } from './build-stamp.js';

export interface StartSteps {
  /** Builds what serving needs into dist/ (and writes the stamp); the exit status. */
  build(): number;
  /** Runs the built `vessel serve` with these arguments. */
  serve(args: string[]): Promise<void>;
  log(line: string): void;
}

/** `npm run build:service`: under npm, its own CLI through this Node; else the `npm` on PATH. */
function npmBuild(root: string): number {
  const npm = process.env.npm_execpath;
  const [cmd, args] = npm === undefined || !/npm-cli\.js$/.test(npm) ? ['npm', ['run', 'build:service']] : [process.execPath, [npm, 'run', 'build:service']];
  const run = spawnSync(cmd, args, { stdio: 'inherit', cwd: root });
  return run.status ?? 1;
}

async function serveBuilt(root: string, args: string[]): Promise<void> {
  const main = join(root, 'dist/src/cli/main.js');
  process.argv = [process.argv[0]!, main, 'serve', ...args];
  await import(pathToFileURL(main).href);
}

/** Builds if stale, then serves; false if the build failed (and nothing was served). */
export async function start(root: string, args: string[], steps: StartSteps): Promise<boolean> {
  const reason = staleness(root);
  if (reason !== null) {
    steps.log(`building first (${reason}): npm run build:service`);
    const status = steps.build();
    if (status !== 0) {
      steps.log(`the build failed (exit status ${status})`);
      return false;
    }
  }
  await steps.serve(args);
  return true;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const ok = await start(REPO_ROOT, process.argv.slice(2), {
    build: () => npmBuild(REPO_ROOT),
    serve: (args) => serveBuilt(REPO_ROOT, args),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  if (!ok) process.exitCode = 1;
}
