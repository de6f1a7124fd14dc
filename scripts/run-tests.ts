/**
 * Runs the compiled test files in two groups: the host's own tests (unit, api, store), which need
 * no VM and run side by side, then the real-VM tests, one file at a time (they share the
 * machine's cores with the guests they boot, and a loaded TCG guest is what makes VM tests slow
 * and their hosts' timeouts near). Each group prints the spec results and each file's duration;
 * the last line is the counts of both, `N passed, N failed`.
 *
 *   node dist/scripts/run-tests.js                   every test
 *   node dist/scripts/run-tests.js --group host      the host's tests only
 *   node dist/scripts/run-tests.js unit api dist/test/vm/cli.test.js …
 *                                                    these folders of dist/test and files, grouped the same way
 *   node dist/scripts/run-tests.js --skip-node-independent unit …
 *                                                    without the files whose verdict is the same on
 *                                                    every Node (NODE_INDEPENDENT): a second Node's pass
 *
 * VESSEL_TEST_CONCURRENCY sets how many host files run at once (default: the machine's cores).
 *
 * Before the VM files, the run makes one system template (test/support/template-seed.ts), and
 * each VM file's service starts from a copy of it instead of booting its own
 * (VESSEL_TEST_TEMPLATE_SEED: seedForRun below).
 */
import { spawn } from 'node:child_process';
import { availableParallelism, tmpdir } from 'node:os';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseArgs } from 'node:util';
import { REPO_ROOT, SHARED_IMAGE_DIR, TEMPLATE_SEED_ENV } from '../test/support/service.js';
import { makeTemplateSeed } from '../test/support/template-seed.js';

interface Group {
  name: 'host' | 'vm';
  files: string[];
  concurrency: number;
}

const TEST_ROOT = 'dist/test';
const HOST_DIRS = ['unit', 'api', 'store'];
const REPORTER = join(TEST_ROOT, 'support/durations-reporter.js');

/**
 * A folder's compiled test files whose source still exists: tsc never removes what it once wrote,
 * so a test deleted or renamed in test/ would otherwise run on from an old dist/.
 */
const testFiles = (dir: string): string[] =>
  readdirSync(join(TEST_ROOT, dir))
    .filter((f) => f.endsWith('.test.js') && existsSync(join(REPO_ROOT, 'test', dir, f.replace(/\.js$/, '.ts'))))
    .sort()
    .map((f) => join(TEST_ROOT, dir, f));

const isVmFile = (file: string): boolean => relative(TEST_ROOT, file).startsWith(`vm/`);

/**
 * Test files whose verdict cannot change with the Node that runs them, which a run on a second
 * Node (CI's Node 24 pass, .ci/run) leaves out. Two kinds, and nothing else:
 * - checks of the repository's files: they read sources, documents and manifests, or run a tool
 *   over them (eslint, dependency-cruiser, tsc), and judge what is written, not how it runs;
 * - tests of pure functions (parsers, matchers, policies, state tables): no I/O, no timers, no
 *   process, nothing of Node's own but the language, which both Nodes' V8 run alike.
 * Every other file, a new one included, runs on both: it drives our code through what Node
 * provides and changes between versions (HTTP, sockets, TLS, child processes, streams, the
 * SQLite build the store loads, fetch and WebSocket in the SDK, the CLI's compile cache).
 */
const NODE_INDEPENDENT = [
  // Checks of the repository's files.
  'unit/lint',
  'unit/import-boundaries',
  'unit/deploy-manifests',
  'unit/agent-protocol-source',
  'unit/e2b-protocol',
  'unit/errors',
  'unit/sdk-build',
  // Pure functions.
  'unit/acknowledged-notes',
  'unit/config-database-url',
  'unit/config-object-store',
  'unit/config-rate-limit',
  'unit/console-logic',
  'unit/console-visible-text',
  'unit/failed-tokens',
  'unit/fleet-placement',
  'unit/host-pattern',
  'unit/ingress-urls',
  'unit/last-known',
  'unit/lifecycle',
  'unit/lifecycle-timers',
  'unit/loopback',
  'unit/node-directory',
  'unit/output-encoder',
  'unit/path-glob',
  'unit/templates-dockerfile',
  'unit/websocket-auth',
].map((name) => join(TEST_ROOT, `${name}.test.js`));

/** A folder of dist/test by its name (`unit`), or a file's path. */
const expand = (arg: string): string[] => (/^[a-z]+$/.test(arg) ? testFiles(arg) : [arg]);

function groups(args: string[], only: string | undefined, skipNodeIndependent: boolean): Group[] {
  const named = args.length > 0 ? args.flatMap(expand) : [...HOST_DIRS.flatMap(testFiles), ...testFiles('vm')];
  if (skipNodeIndependent) for (const file of NODE_INDEPENDENT) if (!existsSync(file)) throw new Error(`${file} is listed in NODE_INDEPENDENT but does not exist`);
  const chosen = skipNodeIndependent ? named.filter((f) => !NODE_INDEPENDENT.includes(f)) : named;
  const hostConcurrency = Number(process.env.VESSEL_TEST_CONCURRENCY ?? availableParallelism());
  const all: Group[] = [
    { name: 'host', files: chosen.filter((f) => !isVmFile(f)), concurrency: Math.max(1, hostConcurrency) },
    { name: 'vm', files: chosen.filter(isVmFile), concurrency: 1 },
  ];
  return all.filter((g) => g.files.length > 0 && (only === undefined || g.name === only));
}

/** Runs one group under node's test runner; resolves with its counts as the reporter printed them. */
function runGroup(group: Group): Promise<{ passed: number; failed: number; exitCode: number }> {
  const args = [
    '--test',
    `--test-concurrency=${group.concurrency}`,
    '--test-reporter=spec',
    '--test-reporter-destination=stdout',
    `--test-reporter=./${REPORTER}`,
    '--test-reporter-destination=stdout',
    ...group.files,
  ];
  process.stdout.write(`\n# ${group.name} tests: ${group.files.length} files, ${group.concurrency} at a time\n`);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'inherit'] });
    let tail = '';
    child.stdout.on('data', (chunk: Buffer) => {
      process.stdout.write(chunk);
      tail = (tail + chunk.toString('utf8')).slice(-4096);
    });
    child.on('error', reject);
    child.on('close', (code) => {
      const counts = /^(\d+) passed, (\d+) failed$/m.exec(tail.split('\n').filter((l) => l !== '').slice(-1)[0] ?? '');
      resolve({ passed: Number(counts?.[1] ?? 0), failed: counts === null ? 1 : Number(counts[2]), exitCode: code ?? 1 });
    });
  });
}

const { values, positionals } = parseArgs({ options: { group: { type: 'string' }, 'skip-node-independent': { type: 'boolean' } }, allowPositionals: true });
if (values.group !== undefined && values.group !== 'host' && values.group !== 'vm') throw new Error(`--group is host or vm, not '${values.group}'`);
// A log of several runs (CI runs on two Nodes) says which Node ran each.
process.stdout.write(`# Node ${process.version}\n`);

/**
 * The run's template seed. Without VESSEL_TEST_TEMPLATE_SEED it is made in a temp directory that
 * `done` removes; naming a directory that does not exist yet (or is empty) makes it there and
 * keeps it, for the runs after; naming a seed uses it. A seed that cannot be made is a failure of
 * the run; the VM files then run without one, and show why themselves.
 */
async function seedForRun(): Promise<{ made: boolean; done(): void }> {
  const given = process.env[TEMPLATE_SEED_ENV] ?? '';
  const kept = { made: true, done: () => undefined };
  if (given !== '' && existsSync(given) && readdirSync(given).length > 0) return kept;
  const dir = given !== '' ? given : mkdtempSync(join(tmpdir(), 'vessel-template-seed-'));
  const done = given !== '' ? () => undefined : (): void => rmSync(dir, { recursive: true, force: true });
  // Ctrl-C ends the run (its children get the signal too): a temp seed goes with it.
  process.once('exit', done);
  for (const signal of ['SIGINT', 'SIGTERM'] as const) process.once(signal, () => process.exit(128 + (signal === 'SIGINT' ? 2 : 15)));
  const started = Date.now();
  process.stdout.write(`\n# system template seed for the VM files, in ${dir}\n`);
  try {
    await makeTemplateSeed(dir);
  } catch (err) {
    process.stdout.write(`could not make it, so each VM file makes its own: ${err instanceof Error ? err.message : String(err)}\n`);
    rmSync(dir, { recursive: true, force: true });
    delete process.env[TEMPLATE_SEED_ENV];
    return { made: false, done: () => undefined };
  }
  process.stdout.write(`made in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  process.env[TEMPLATE_SEED_ENV] = dir;
  return { made: true, done };
}

/**
 * The guest image the VM files share (and the host packages the service needs, QEMU 10), built
 * if missing while the host's files run: the build waits mostly on the network and the disk, the
 * host's tests on the CPU, and no host test uses QEMU. So a fresh machine's `npm test` pays for
 * the image once, beside the host group. Resolves with what the build printed, or rejects.
 */
function guestImage(): Promise<string> {
  return new Promise((resolve, reject) => {
    const build = spawn(process.execPath, [join(REPO_ROOT, 'dist/src/cli/main.js'), 'image', 'build', '--if-missing'], {
      cwd: REPO_ROOT,
      env: { ...process.env, VESSEL_IMAGE_DIR: SHARED_IMAGE_DIR },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    const keep = (d: Buffer) => (log = (log + d.toString()).slice(-64 * 1024));
    build.stdout.on('data', keep);
    build.stderr.on('data', keep);
    build.on('error', reject);
    build.on('exit', (code) => (code === 0 ? resolve(log) : reject(new Error(`the guest image build failed (${code}):\n${log}`))));
  });
}

let passed = 0;
let failed = 0;
let exitCode = 0;
/** Seconds into the run, for the log: which of the image build and the host group held the VM files up. */
const runStarted = Date.now();
const secondsIn = (): string => `${((Date.now() - runStarted) / 1000).toFixed(1)} s`;
const chosenGroups = groups(positionals, values.group, values['skip-node-independent'] === true);
let imageReadyAt = '';
const image = chosenGroups.some((g) => g.name === 'vm') ? guestImage().finally(() => (imageReadyAt = secondsIn())) : null;
image?.catch(() => undefined);
for (const group of chosenGroups) {
  if (group.name === 'vm' && image !== null) {
    const askedAt = secondsIn();
    const built = await image.then(
      (log) => ({ ok: true, log }),
      (err: Error) => ({ ok: false, log: err.message }),
    );
    process.stdout.write(`\n# guest image (built beside the host's tests if it was missing)\n${built.log}`);
    process.stdout.write(`ready ${imageReadyAt} into the run; the VM files asked for it at ${askedAt}\n`);
    if (!built.ok) {
      failed += group.files.length;
      continue;
    }
  }
  // A seed costs one template: it pays off from the second VM file on, or from the next run when it is kept.
  const wantsSeed = group.name === 'vm' && (group.files.length > 1 || (process.env[TEMPLATE_SEED_ENV] ?? '') !== '');
  const seed = wantsSeed ? await seedForRun() : { made: true, done: () => undefined };
  if (!seed.made) failed += 1;
  try {
    const result = await runGroup(group);
    passed += result.passed;
    failed += result.failed;
    if (result.exitCode !== 0) exitCode = result.exitCode;
  } finally {
    seed.done();
  }
}
process.stdout.write(`\n${passed} passed, ${failed} failed\n`);
process.exitCode = exitCode !== 0 || failed > 0 ? exitCode || 1 : 0;
