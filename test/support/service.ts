/**
 * Runs the real service (`vessel serve`) as a child process over a temp data directory, the way
 * an operator would, so tests can kill -9 it and start it again. The guest image is shared
 * between runs through VESSEL_IMAGE_DIR and built once if missing.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { get as httpsGet } from 'node:https';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import { instanceIdOf } from '../../src/platform/instance-id.js';
import { deleteTap, listTaps } from '../../src/net/taps.js';
import { removeRuleset } from '../../src/net/nftables.js';

export const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');
export const SHARED_IMAGE_DIR = process.env.VESSEL_IMAGE_DIR ?? join(REPO_ROOT, 'data/images');
const CLI = join(REPO_ROOT, 'dist/src/cli/main.js');

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as { port: number };
      srv.close(() => res(port));
    });
    srv.on('error', rej);
  });
}

/**
 * With VESSEL_TEST_DATA_ROOT set, each service of a test file gets a data directory of its own
 * under it, named after the file and its order (`lifecycle-1`), which is kept: a rerun of the file
 * starts where the last run left it, its system checkpoints already made, and a failed run's files
 * are there to read. Without it, a temp directory that destroy() removes.
 */
const KEPT_DATA_ROOT = process.env.VESSEL_TEST_DATA_ROOT;
let keptServices = 0;

function keptDataDir(root: string): string {
  const dir = join(root, `${basename(process.argv[1] ?? 'test', '.test.js')}-${++keptServices}`);
  mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * The run's system template (test/support/template-seed.ts): a data directory named by
 * VESSEL_TEST_TEMPLATE_SEED whose service made the default template. What of it a new data
 * directory takes: the CA the template trusts, the store that records it, its files.
 */
export const TEMPLATE_SEED_ENV = 'VESSEL_TEST_TEMPLATE_SEED';
export const SEED_ENTRIES = ['ca.crt', 'ca.key', 'store', 'checkpoints', 'layers'];

function templateSeed(): string | undefined {
  const seed = process.env[TEMPLATE_SEED_ENV];
  if (seed === undefined || seed === '') return undefined;
  const missing = SEED_ENTRIES.filter((entry) => !existsSync(join(seed, entry)));
  if (missing.length > 0) throw new Error(`${TEMPLATE_SEED_ENV}=${seed} is not a template seed: it has no ${missing.join(', ')}`);
  return seed;
}

/**
 * Copies the seed into an empty data directory, keeping modes and owners (checkpoint files are
 * root's and read-only) and holes (a template's RAM file is mostly holes). A copy, not a link:
 * the directory's files are its own to change (checkpoint-integrity damages its template).
 */
function copySeed(seed: string, dataDir: string): void {
  const cp = spawnSync('cp', ['-a', '--sparse=always', ...SEED_ENTRIES.map((entry) => join(seed, entry)), `${dataDir}/`], { encoding: 'utf8' });
  if (cp.status !== 0) throw new Error(`could not copy the template seed into ${dataDir}: ${cp.stderr}`);
}

/**
 * Starts a data directory the test chose (one on a small disk) from the run's template, as a new
 * temp directory starts by itself; without a seed it is left empty, and its service makes the
 * template. The directory must not exist yet, or be empty.
 */
export function seedInto(dataDir: string): void {
  const seed = templateSeed();
  if (seed === undefined) return;
  mkdirSync(dataDir, { recursive: true });
  if (readdirSync(dataDir).length > 0) throw new Error(`${dataDir} is not empty: a seed goes into a new data directory`);
  copySeed(seed, dataDir);
}

export interface Reply {
  status: number;
  body: any;
  headers: Headers;
}

export class Service {
  /** The admin token: VESSEL_ADMIN_TOKEN when the test gives one (a fleet's nodes share it), else a fresh one. */
  readonly token: string;
  readonly dataDir: string;
  #child: ChildProcess | null = null;
  #port = 0;
  readonly #keepDataDir: boolean;
  ingressPort = 0;
  log = '';

  /**
   * `wrapper` runs the service under another program (strace): its argv, before the service's
   * own. Signals then go to the service itself, found through its DATA_DIR/service.pid.
   */
  constructor(
    readonly env: Record<string, string> = {},
    dataDir?: string,
    readonly wrapper: string[] = [],
    /** After `serve`: `--role api` or `--role node` for a fleet's processes. */
    readonly serveArgs: string[] = [],
  ) {
    this.#keepDataDir = dataDir === undefined && KEPT_DATA_ROOT !== undefined;
    this.dataDir = dataDir ?? (KEPT_DATA_ROOT !== undefined ? keptDataDir(KEPT_DATA_ROOT) : mkdtempSync(join(tmpdir(), 'vessel-svc-')));
    // A single host on SQLite, in a data directory of its own that is new, starts from the run's
    // template. A fleet's processes keep their templates and CA in PostgreSQL; a directory the
    // test chose (a small disk, a seed being made) is left as the test made it (seedInto() for
    // one that should start from the template too).
    const singleHost = serveArgs.length === 0 && (env.VESSEL_DATABASE_URL ?? process.env.VESSEL_DATABASE_URL) === undefined;
    const seed = dataDir === undefined && singleHost && readdirSync(this.dataDir).length === 0 ? templateSeed() : undefined;
    if (seed !== undefined) copySeed(seed, this.dataDir);
    this.token = env.VESSEL_ADMIN_TOKEN ?? `vsl_test_${randomBytes(12).toString('hex')}`;
  }

  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  async start(): Promise<void> {
    this.#port = await freePort();
    // Several services may share the host in one test: each gets its own gateway ports.
    const [proxyPort, dnsPort, ingressPort] = [await freePort(), await freePort(), await freePort()];
    this.ingressPort = ingressPort;
    const argv = [...this.wrapper, process.execPath, CLI, 'serve', ...this.serveArgs];
    const child = spawn(argv[0]!, argv.slice(1), {
      env: {
        ...process.env,
        VESSEL_DATA_DIR: this.dataDir,
        VESSEL_IMAGE_DIR: SHARED_IMAGE_DIR,
        VESSEL_PORT: String(this.#port),
        // A VM host of a fleet serves on its internal port alone: the same one here.
        VESSEL_INTERNAL_PORT: String(this.#port),
        VESSEL_ADMIN_TOKEN: this.token,
        VESSEL_LOG_LEVEL: 'warn',
        VESSEL_EGRESS_PROXY_PORT: String(proxyPort),
        VESSEL_EGRESS_DNS_PORT: String(dnsPort),
        VESSEL_INGRESS_PORT: String(ingressPort),
        ...this.env,
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    this.#child = child;
    child.stdout!.on('data', (d) => (this.log = (this.log + d).slice(-20000)));
    child.stderr!.on('data', (d) => (this.log = (this.log + d).slice(-20000)));
    // The first start may build the guest image: allow for it.
    const deadline = Date.now() + 600_000;
    while (Date.now() < deadline) {
      if (child.exitCode !== null) throw new Error(`service exited (${child.exitCode}):\n${this.log}`);
      try {
        if (await this.#healthy()) return;
      } catch {
        // not listening yet
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    throw new Error(`service did not become healthy:\n${this.log}`);
  }

  /** The pid of the part `name` once the service has started one other than `old` (within 30 s), else what runs then. */
  async partStartedAgain(name: string, old: number): Promise<number | null> {
    let next = this.partPid(name);
    for (let i = 0; i < 300 && (next === null || next === old); i++) {
      await new Promise((r) => setTimeout(r, 100));
      next = this.partPid(name);
    }
    return next;
  }

  /** The pid of the service's part `name` ('gateway'), found through /proc as its child; null when none runs. */
  partPid(name: string): number | null {
    const service = this.wrapper.length === 0 ? this.#child?.pid : Number(readFileSync(join(this.dataDir, 'service.pid'), 'utf8'));
    for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        if (ppid === service && readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`${name}-process.js`)) return Number(pid);
      } catch {
        // it ended while we looked
      }
    }
    return null;
  }

  /**
   * An enrolled VM host (VESSEL_NODE_KEY) serves its port over TLS alone, with the fleet's
   * certificate: its probe is HTTPS, as the kubelet's is, verifying nothing.
   */
  #healthy(): Promise<boolean> {
    if (this.env.VESSEL_NODE_KEY === undefined) return fetch(`${this.url}/healthz`).then((r) => r.ok);
    return new Promise((resolve, reject) => {
      const out = httpsGet({ host: '127.0.0.1', port: this.#port, path: '/healthz', rejectUnauthorized: false }, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      });
      out.once('error', reject);
    });
  }

  /** The port the service's API (a VM host's hop) listens on. */
  get port(): number {
    return this.#port;
  }

  /** kill -9: no graceful shutdown, exactly what a crash looks like. */
  async kill9(): Promise<void> {
    await this.#signal('SIGKILL');
  }

  async stop(): Promise<void> {
    await this.#signal('SIGTERM');
  }

  async #signal(signal: NodeJS.Signals): Promise<void> {
    const child = this.#child;
    // Gone already: a child killed by a signal (kill9) has a signalCode and no exitCode, and its
    // 'exit' has been emitted, so waiting for it would never end.
    if (child === null || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise((r) => child.once('exit', r));
    if (this.wrapper.length === 0) child.kill(signal);
    else process.kill(Number(readFileSync(join(this.dataDir, 'service.pid'), 'utf8')), signal);
    await exited;
  }

  async call(method: string, path: string, body?: unknown, token: string | null = this.token): Promise<Reply> {
    const headers: Record<string, string> = {};
    if (token !== null) headers.authorization = `Bearer ${token}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const res = await fetch(`${this.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await res.text();
    let parsed: unknown = text;
    if ((res.headers.get('content-type') ?? '').includes('json') && text !== '') parsed = JSON.parse(text);
    return { status: res.status, body: parsed, headers: res.headers };
  }

  /** Deletes every runtime (killing its VM) and the data directory (kept under VESSEL_TEST_DATA_ROOT). */
  async destroy(): Promise<void> {
    try {
      if (this.#child !== null && this.#child.exitCode === null && this.#child.signalCode === null) {
        const list = await this.call('GET', '/v1/runtimes?limit=1000');
        // Side by side: each is a VM and files of its own (egress.test.ts leaves about 25).
        await Promise.all(((list.body.data ?? []) as Array<{ id: string }>).map((rt) => this.call('DELETE', `/v1/runtimes/${rt.id}`)));
      }
    } finally {
      await this.stop();
      killProcessesUnder(this.dataDir);
      await removeNetworkOf(this.dataDir);
      if (!this.#keepDataDir) rmSync(this.dataDir, { recursive: true, force: true });
    }
  }
}

/**
 * Removes the TAPs and the nftables table of the service on `dir`. The service keeps them when it
 * stops, for the VMs that run on (its next start adopts them); a test's service has none left, and
 * another file's service on the host would otherwise count its TAPs among the host's.
 */
export async function removeNetworkOf(dir: string): Promise<void> {
  const instance = instanceIdOf(dir);
  for (const { tap, owner } of await listTaps()) if (owner?.instance === instance) await deleteTap(tap);
  await removeRuleset(`vessel_${instance}`).catch(() => undefined);
}

/**
 * Kills whatever still runs from `dir`: VMs survive the service by design (it adopts them at its
 * next start), so a spare or a template still booting when a test's service stops would
 * otherwise outlive the test, its directory gone.
 */
export function killProcessesUnder(dir: string): void {
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(`${dir}/`)) process.kill(Number(pid), 'SIGKILL');
    } catch {
      // gone meanwhile, or not ours to read
    }
  }
}
