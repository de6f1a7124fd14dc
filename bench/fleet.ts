/**
 * What the API node → VM host hop costs (issue 15 §4), in one invocation on one machine: one
 * PostgreSQL, one VM host (`--role node`) and one API node (`--role api`), real VMs. The same
 * calls go through the API node, and straight to the host with the hop's headers signed here (as
 * an API node would), taken in turn each round so drift touches both alike:
 * - exec of /bin/true in one running runtime;
 * - a create (a fork of the host's system template) and its delete.
 * Reported: p50 of each path and their ratio. GET throughput on PostgreSQL against SQLite is
 * bench/api.ts's (`BENCH_STORE=postgres npm run bench:api`).
 */
import { randomBytes } from 'node:crypto';
import { signHop } from '../src/cluster/hop.js';
import { wholeBody } from '../src/cluster/hop-body.js';
import { ADMIN_TOKEN_ID, DEFAULT_TENANT } from '../src/core/tokens.js';
import { startPostgres } from '../test/support/postgres-cluster.js';
import { Service } from '../test/support/service.js';

const EXECS = Number(process.env.BENCH_EXECS ?? 60);
const CREATES = Number(process.env.BENCH_CREATES ?? 8);
const WARMUP = 5;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;

const secret = randomBytes(32).toString('hex');
const admin = `vsl_bench_${randomBytes(12).toString('hex')}`;
let sequence = 0;

/** A call as the API node makes it, straight to the host. */
async function direct(host: Service, method: string, path: string, body?: unknown): Promise<Response> {
  const requestId = `bench-${++sequence}`;
  const principal = { tokenId: ADMIN_TOKEN_ID, tenantId: DEFAULT_TENANT, scopes: new Set(['admin'] as const) };
  // The body is signed with the headers, by its digest, as an API node signs a body it holds whole.
  const bytes = Buffer.from(body === undefined ? '' : JSON.stringify(body));
  const headers: Record<string, string> = { 'x-request-id': requestId, ...signHop(secret, principal, { method, url: path, requestId, node: 'bench-host', body: wholeBody(bytes) }) };
  if (body !== undefined) headers['content-type'] = 'application/json';
  return fetch(`${host.url}${path}`, { method, headers, body: body === undefined ? undefined : bytes });
}

async function viaApi(api: Service, method: string, path: string, body?: unknown): Promise<Response> {
  const headers: Record<string, string> = { authorization: `Bearer ${admin}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  return fetch(`${api.url}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
}

async function timed(call: () => Promise<Response>, expect: number): Promise<number> {
  const t = performance.now();
  const res = await call();
  await res.arrayBuffer();
  if (res.status !== expect) throw new Error(`answered ${res.status}, not ${expect}`);
  return performance.now() - t;
}

async function main(): Promise<void> {
  const postgres = startPostgres();
  const shared = {
    VESSEL_DATABASE_URL: await postgres.createDatabase('bench'),
    VESSEL_INTERNAL_SECRET: secret,
    VESSEL_MASTER_KEY: randomBytes(32).toString('hex'),
    VESSEL_ADMIN_TOKEN: admin,
    VESSEL_WARM_POOL: '0',
    VESSEL_NODE_NAME: 'bench-host',
  };
  const host = new Service(shared, undefined, [], ['--role', 'node']);
  const api = new Service(shared, undefined, [], ['--role', 'api']);
  try {
    await host.start();
    await api.start();
    const made = await viaApi(api, 'POST', '/v1/runtimes', { display_name: 'bench' });
    if (made.status !== 201) throw new Error(`create: ${made.status} ${await made.text()}`);
    const exec = { command: '/bin/true' };
    const execs = { api: [] as number[], direct: [] as number[] };
    for (let i = 0; i < WARMUP + EXECS; i++) {
      const a = await timed(() => viaApi(api, 'POST', '/v1/runtimes/bench/exec', exec), 200);
      const d = await timed(() => direct(host, 'POST', '/v1/runtimes/bench/exec', exec), 200);
      if (i >= WARMUP) {
        execs.api.push(a);
        execs.direct.push(d);
      }
    }
    const creates = { api: [] as number[], direct: [] as number[] };
    for (let i = 0; i < CREATES; i++) {
      creates.api.push(await timed(() => viaApi(api, 'POST', '/v1/runtimes', { display_name: `a-${i}` }), 201));
      await timed(() => viaApi(api, 'DELETE', `/v1/runtimes/a-${i}`), 200);
      creates.direct.push(await timed(() => direct(host, 'POST', '/v1/runtimes', { display_name: `d-${i}` }), 201));
      await timed(() => direct(host, 'DELETE', `/v1/runtimes/d-${i}`), 200);
    }
    const row = (what: string, x: { api: number[]; direct: number[] }) =>
      `| ${what} | ${pct(x.api, 50).toFixed(1)} ms | ${pct(x.direct, 50).toFixed(1)} ms | ${ratio(pct(x.api, 50), pct(x.direct, 50))} | ${pct(x.api, 90).toFixed(1)} / ${pct(x.direct, 90).toFixed(1)} ms |`;
    process.stdout.write(
      [
        `fleet hop (${EXECS} execs, ${CREATES} creates, one VM host and one API node on one machine, PostgreSQL)`,
        '| call | p50 through the API node | p50 straight to the host | ratio | p90 (API / host) |',
        '|---|---|---|---|---|',
        row('exec /bin/true', execs),
        row('create (fork of the template)', creates),
        '',
      ].join('\n'),
    );
  } finally {
    await api.destroy().catch(() => undefined);
    await host.destroy().catch(() => undefined);
    postgres.stop();
  }
}

await main();
