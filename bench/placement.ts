/**
 * What a create's placement costs the database as the fleet grows (issue 30 §4; docs/scaling.md,
 * "Placement"): the hosts' holdings as placement reads them (`nodes.load()`, one kept row per
 * host) against the sum over every runtime row that it replaced (the baseline, the same query as
 * before, run on the same database in the same round), at 1k, 10k and 100k runtime rows spread
 * over 10 hosts, on a durable PostgreSQL the bench starts. Also a runtime row's insert, which now
 * moves its host's counts in the same transaction. Taken in turn, one of each at a time.
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { LIVE_STATUSES } from '../src/core/lifecycle.js';
import { PostgresStore } from '../src/store/postgres-store.js';
import { startPostgres } from '../test/support/postgres-cluster.js';
import { runtime } from '../test/store/store-contract.js';

const SIZES = (process.env.BENCH_ROWS ?? '1000,10000,100000').split(',').map(Number);
const CALLS = Number(process.env.BENCH_CALLS ?? 200);
const HOSTS = 10;

/** What placement ran before migration 10: every runtime of the fleet, summed per host. */
const SCAN = `SELECT node, count(*) AS runtimes,
  coalesce(sum((resources::jsonb ->> 'vcpus')::numeric) FILTER (WHERE status = ANY($1::text[])), 0) AS vcpus,
  coalesce(sum((resources::jsonb -> 'limits' ->> 'memory_mib')::numeric) FILTER (WHERE status = ANY($1::text[])), 0) AS memory_mib
FROM runtimes WHERE node IS NOT NULL GROUP BY node`;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const ms = (x: number) => `${x.toFixed(2)} ms`;

/** Copies one stored runtime row until the table holds `rows`, each with its own id and name, spread over the hosts. */
async function fillTo(db: pg.Client, rows: number): Promise<void> {
  const { rows: have } = await db.query<{ n: string }>('SELECT count(*) AS n FROM runtimes');
  const missing = rows - Number(have[0]!.n);
  if (missing <= 0) return;
  const { rows: cols } = await db.query<{ name: string }>(
    "SELECT column_name AS name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'runtimes' AND column_name NOT IN ('seq', 'id', 'display_name', 'node', 'status')",
  );
  const copied = cols.map((c) => pg.escapeIdentifier(c.name)).join(', ');
  await db.query(
    `INSERT INTO runtimes (id, display_name, node, status, ${copied})
     SELECT gen_random_uuid()::text, 'fill-' || gen_random_uuid()::text, 'host-' || (i % ${HOSTS}),
       (ARRAY['running', 'paused', 'shutdown', 'suspended'])[1 + i % 4], ${copied}
     FROM (SELECT * FROM runtimes WHERE display_name = 'seed') AS seed, generate_series(1, $1) AS i`,
    [missing],
  );
  await db.query('ANALYZE runtimes');
}

async function main(): Promise<void> {
  const postgres = startPostgres({ durable: true });
  const url = await postgres.createDatabase('bench');
  const store = await PostgresStore.open(url);
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  const live = [...LIVE_STATUSES];
  try {
    await store.runtimes.insert({ ...runtime('acme', 'seed'), node: 'host-0' });
    const lines = [
      `placement's read of the hosts' holdings and a runtime row's insert, ${CALLS} of each per size, one at a time, ${HOSTS} hosts, durable PostgreSQL on a unix socket`,
      '| runtime rows | kept holdings p50 | sum over runtimes p50 (before) | ratio | insert p50 |',
      '|---|---|---|---|---|',
    ];
    for (const size of SIZES) {
      await fillTo(db, size);
      const kept: number[] = [];
      const scanned: number[] = [];
      const inserts: number[] = [];
      for (let i = 0; i < CALLS; i++) {
        let t = performance.now();
        const load = await store.nodes.load();
        kept.push(performance.now() - t);
        t = performance.now();
        const { rows } = await db.query(SCAN, [live]);
        scanned.push(performance.now() - t);
        if (load.size !== rows.length) throw new Error(`the kept holdings name ${load.size} hosts, the sum ${rows.length}`);
        t = performance.now();
        await store.runtimes.insert({ ...runtime('acme', `new-${randomUUID()}`), node: `host-${i % HOSTS}` });
        inserts.push(performance.now() - t);
      }
      const { rows: sums } = await db.query(SCAN, [live]);
      const load = await store.nodes.load();
      for (const r of sums) {
        const got = load.get(String(r.node));
        if (got?.runtimes !== Number(r.runtimes) || got.vcpus !== Number(r.vcpus) || got.memoryMib !== Number(r.memory_mib)) throw new Error(`${String(r.node)}: kept ${JSON.stringify(got)}, summed ${JSON.stringify(r)}`);
      }
      lines.push(`| ${size} | ${ms(pct(kept, 50))} | ${ms(pct(scanned, 50))} | ${(pct(kept, 50) / pct(scanned, 50)).toFixed(3)}× | ${ms(pct(inserts, 50))} |`);
    }
    process.stdout.write(`${lines.join('\n')}\n`);
  } finally {
    await db.end();
    await store.close();
    postgres.stop();
  }
}

await main();
