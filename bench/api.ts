/**
 * The API's hot paths through the real service (auth, rate limiter, SQLite, schemas, logging),
 * each against a bare Fastify route in its own process, measured with autocannon in one
 * invocation; prints throughput and p50/p99 with ratios:
 * - a read, GET /v1/secrets/{id}, against a route returning the same JSON;
 * - a write, POST /v1/secrets, against a route that inserts the same row into SQLite in WAL mode
 *   with synchronous=FULL (an acknowledged write is on disk), i.e. the cost of durability alone.
 * BENCH_STORE=postgres runs the service on a PostgreSQL cluster of its own (fsync on, unix
 * socket) instead of its embedded SQLite, to compare the two stores' throughput.
 */
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { startPostgres } from '../test/support/postgres-cluster.js';
import { REPO_ROOT, Service, freePort } from '../test/support/service.js';

const DURATION = Number(process.env.BENCH_SECONDS ?? 5);
const CONNECTIONS = 10;
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);

type Measure = { rps: number; p50: number; p99: number };
/** The round with the median throughput (its latencies come with it). */
const median = (ms: Measure[]): Measure => [...ms].sort((a, b) => a.rps - b.rps)[Math.floor(ms.length / 2)]!;

const percentile = (sorted: Float64Array, p: number): number => sorted[Math.min(sorted.length - 1, Math.floor((sorted.length * p) / 100))]!;

let written = 0;
/** Creates of secrets with names never used before. */
const writes = (): autocannon.Request[] => [
  {
    method: 'POST',
    setupRequest: (req) => ({ ...req, body: JSON.stringify({ name: `w${process.pid}-${written++}`, value: 'v' }) }),
  },
];

async function load(url: string, token?: string, requests?: autocannon.Request[]): Promise<Measure> {
  // autocannon's own latency histogram counts whole milliseconds, and these requests take a
  // fraction of one: its response events carry the exact time.
  const times: number[] = [];
  const headers: Record<string, string> = { 'content-type': 'application/json', ...(token ? { authorization: `Bearer ${token}` } : {}) };
  const r = await new Promise<autocannon.Result>((resolve, reject) => {
    const run = autocannon({ url, connections: CONNECTIONS, duration: DURATION, headers, ...(requests === undefined ? {} : { requests }) }, (err, result) => (err ? reject(err as Error) : resolve(result)));
    run.on('response', (_client, _status, _bytes, ms) => void times.push(ms));
  });
  if (r.non2xx > 0 || r.errors > 0) throw new Error(`${url}: ${r.non2xx} non-2xx, ${r.errors} errors`);
  const sorted = Float64Array.from(times).sort();
  return { rps: r.requests.average, p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

const STORE = process.env.BENCH_STORE ?? 'sqlite';
if (STORE !== 'sqlite' && STORE !== 'postgres') throw new Error('BENCH_STORE must be sqlite or postgres');
const cluster = STORE === 'postgres' ? startPostgres({ durable: true }) : null;
const databaseUrl: Record<string, string> = cluster === null ? {} : { VESSEL_DATABASE_URL: await cluster.createDatabase('bench') };
console.log(`store: ${STORE}`);
const svc = new Service({ VESSEL_RATE_LIMIT_RPS: '1000000000', VESSEL_RATE_LIMIT_BURST: '1000000000', ...databaseUrl });
await svc.start();
let baseline: ReturnType<typeof spawn> | null = null;
try {
  const secret = (await svc.call('POST', '/v1/secrets', { name: 'bench', value: 'v', cache_ttl_secs: 60 })).body.data;
  const body = (await svc.call('GET', `/v1/secrets/${secret.id}`)).body;
  const port = await freePort();
  baseline = spawn(process.execPath, [join(REPO_ROOT, 'dist/bench/baseline-server.js'), String(port), JSON.stringify(body)], { stdio: ['ignore', 'pipe', 'inherit'] });
  await new Promise((r) => baseline!.stdout!.once('data', r));

  /**
   * Warms both up, then measures in alternating rounds so drift on a noisy machine hits both,
   * and reports each side's median round.
   */
  const compare = async (title: string, baseUrl: string, ourUrl: string, goal: string, requests?: () => autocannon.Request[]) => {
    await load(baseUrl, undefined, requests?.());
    await load(ourUrl, svc.token, requests?.());
    const baseRounds: Measure[] = [];
    const ourRounds: Measure[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      baseRounds.push(await load(baseUrl, undefined, requests?.()));
      ourRounds.push(await load(ourUrl, svc.token, requests?.()));
    }
    const base = median(baseRounds);
    const ours = median(ourRounds);
    const row = (name: string, m: Measure) =>
      `${name.padEnd(28)} ${m.rps.toFixed(0).padStart(8)} req/s   p50 ${m.p50.toFixed(3).padStart(6)} ms   p99 ${m.p99.toFixed(3).padStart(6)} ms`;
    console.log(`${title}, ${CONNECTIONS} connections, median of ${ROUNDS} alternating rounds of ${DURATION} s`);
    console.log(row('bare fastify (baseline)', base));
    console.log(row('vessel', ours));
    console.log(`throughput ratio vessel/baseline: ${(ours.rps / base.rps).toFixed(2)}x${goal}`);
    console.log(`p50 ratio: ${(ours.p50 / base.p50).toFixed(2)}x, p99 ratio: ${(ours.p99 / base.p99).toFixed(2)}x`);
  };
  await compare('GET /v1/secrets/{id}', `http://127.0.0.1:${port}/v1/secrets/${secret.id}`, `${svc.url}/v1/secrets/${secret.id}`, ' (goal >= 0.70x)');
  await compare('POST /v1/secrets (durable insert)', `http://127.0.0.1:${port}/v1/secrets`, `${svc.url}/v1/secrets`, '', writes);
} finally {
  baseline?.kill();
  await svc.destroy();
  cluster?.stop();
}
