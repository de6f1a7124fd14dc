/**
 * What moving a checkpoint costs a fork (docs/scaling.md, "Moving checkpoints"), in one
 * invocation on one machine: one PostgreSQL, two VM hosts and one API node, real VMs. A runtime
 * writes BENCH_DIRTY_MIB of random data and is checkpointed; then, in turn each round:
 * - a fork on the host that holds the checkpoint (the baseline), deleted again;
 * - the holder drained and a fork through the API node: placed on the other host, the files
 *   moved there first; deleted again, and the host undrained. The next round moves it back.
 * Then the runtime itself moves between the hosts, keeping its id (docs/scaling.md, "Moving
 * runtimes"), BENCH_ROUNDS times, each beside a checkpoint of it on the host it is on (the
 * baseline: a move is a capture, a copy and a restore). Its guest is paused for the whole move.
 * Reported: p50 of each, their ratios, and the bytes a move carried.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import pg from 'pg';
import { moveRuntime } from '../src/cluster/runtime-moves.js';
import { apiHopClient } from '../src/cluster/enrollment.js';
import { SecretBox } from '../src/core/secret-box.js';
import { PostgresStore } from '../src/store/postgres-store.js';
import { startPostgres } from '../test/support/postgres-cluster.js';
import { Service } from '../test/support/service.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 4);
const DIRTY_MIB = Number(process.env.BENCH_DIRTY_MIB ?? 64);

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
/** An API node reads the hosts' list at most once a second. */
const settle = () => new Promise((r) => setTimeout(r, 1200));

async function main(): Promise<void> {
  const postgres = startPostgres();
  const url = await postgres.createDatabase('bench_move');
  const db = new pg.Client({ connectionString: url });
  await db.connect();
  const shared = {
    VESSEL_DATABASE_URL: url,
    VESSEL_INTERNAL_SECRET: randomBytes(32).toString('hex'),
    VESSEL_MASTER_KEY: randomBytes(32).toString('hex'),
    VESSEL_ADMIN_TOKEN: `vsl_bench_${randomBytes(12).toString('hex')}`,
    VESSEL_WARM_POOL: '0',
  };
  const hosts = ['host-1', 'host-2'].map((name) => new Service({ ...shared, VESSEL_NODE_NAME: name }, undefined, [], ['--role', 'node']));
  const api = new Service(shared, undefined, [], ['--role', 'api']);
  const call = async (method: string, path: string, body?: unknown, expect = 200) => {
    const r = await api.call(method, path, body);
    if (r.status !== expect) throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body.data;
  };
  const holder = async (id: string): Promise<string> => (await db.query('SELECT node FROM checkpoints WHERE id = $1', [id])).rows[0].node;
  const forkAndDelete = async (name: string): Promise<{ ms: number; node: string }> => {
    const t = performance.now();
    await call('POST', '/v1/runtimes', { display_name: name, checkpoint: 'snap' }, 201);
    const ms = performance.now() - t;
    const node = (await db.query('SELECT node FROM runtimes WHERE display_name = $1', [name])).rows[0].node as string;
    await call('DELETE', `/v1/runtimes/${name}`);
    return { ms, node };
  };
  try {
    for (const h of hosts) await h.start();
    await api.start();
    await call('POST', '/v1/runtimes', { display_name: 'source' }, 201);
    await call('POST', '/v1/runtimes/source/exec', { command: `head -c ${DIRTY_MIB}M /dev/urandom > /root/dirty && sync`, timeout_secs: 300 });
    const cp = await call('POST', '/v1/runtimes/source/checkpoints', { name: 'snap' }, 201);
    for (;;) {
      const now = await call('GET', `/v1/checkpoints/${cp.id}`);
      if (now.state === 'failed') throw new Error(now.state_message);
      if (now.state === 'ready') break;
      await new Promise((r) => setTimeout(r, 500));
    }
    const bytes = Number((await db.query('SELECT disk_bytes FROM checkpoints WHERE id = $1', [cp.id])).rows[0].disk_bytes);
    const local: number[] = [];
    const moved: number[] = [];
    for (let i = 0; i < ROUNDS; i++) {
      const from = await holder(cp.id);
      const here = await forkAndDelete(`local-${i}`);
      if (here.node !== from) throw new Error(`a local fork went to ${here.node}`);
      local.push(here.ms);
      await db.query('UPDATE nodes SET draining = true WHERE name = $1', [from]);
      await settle();
      const there = await forkAndDelete(`moved-${i}`);
      if (there.node === from || (await holder(cp.id)) !== there.node) throw new Error('the fork did not move the checkpoint');
      moved.push(there.ms);
      await db.query('UPDATE nodes SET draining = false WHERE name = $1', [from]);
      await settle();
    }
    // The runtime itself, back and forth, beside a checkpoint of it where it is.
    const captures: number[] = [];
    const moves: number[] = [];
    const source = (await db.query("SELECT id, tenant_id, node FROM runtimes WHERE display_name = 'source'")).rows[0] as { id: string; tenant_id: string; node: string };
    const principal = { tokenId: 'bench', tenantId: source.tenant_id, scopes: new Set(['runtimes:write'] as const) };
    // The operator's side of a move, as `vessel node evacuate` makes it.
    const store = await PostgresStore.open(url);
    const client = await apiHopClient(store.nodes, shared.VESSEL_INTERNAL_SECRET, new SecretBox(Buffer.from(shared.VESSEL_MASTER_KEY, 'hex')));
    for (let i = 0; i < ROUNDS; i++) {
      let t = performance.now();
      const extra = await call('POST', '/v1/runtimes/source/checkpoints', { name: `extra-${i}` }, 201);
      while ((await call('GET', `/v1/checkpoints/${extra.id}`)).state === 'creating') await new Promise((r) => setTimeout(r, 50));
      captures.push(performance.now() - t);
      await call('DELETE', `/v1/checkpoints/${extra.id}`);
      const from = (await db.query('SELECT node FROM runtimes WHERE id = $1', [source.id])).rows[0].node as string;
      const to = from === 'host-1' ? 'host-2' : 'host-1';
      const internalUrl = (await db.query('SELECT internal_url FROM nodes WHERE name = $1', [from])).rows[0].internal_url as string;
      t = performance.now();
      await moveRuntime(client, { name: from, internalUrl }, principal, randomUUID(), source.id, to);
      moves.push(performance.now() - t);
      if ((await db.query('SELECT node FROM runtimes WHERE id = $1', [source.id])).rows[0].node !== to) throw new Error('the runtime did not move');
      if ((await call('POST', '/v1/runtimes/source/exec', { command: 'test -s /root/dirty && echo ok' })).stdout !== 'ok\n') throw new Error('the moved runtime lost its disk');
    }
    client.close();
    await store.close();
    const [c, r] = [pct(captures, 50), pct(moves, 50)];
    const [l, m] = [pct(local, 50), pct(moved, 50)];
    process.stdout.write(
      [
        `checkpoint moves (${ROUNDS} rounds; a 512 MiB runtime with ${DIRTY_MIB} MiB written; its checkpoint's own files take ${(bytes / 1048576).toFixed(0)} MiB on disk; two VM hosts and one API node on one machine)`,
        '| fork | p50 | p90 |',
        '|---|---|---|',
        `| on the host that holds the checkpoint | ${l.toFixed(0)} ms | ${pct(local, 90).toFixed(0)} ms |`,
        `| on another host, the checkpoint moved first | ${m.toFixed(0)} ms | ${pct(moved, 90).toFixed(0)} ms |`,
        `ratio (moved / local, p50): ${(m / l).toFixed(2)}×`,
        '',
        `runtime moves (${ROUNDS} rounds, the same runtime back and forth, its id kept)`,
        '| operation | p50 | p90 |',
        '|---|---|---|',
        `| a checkpoint of it where it is, to ready | ${c.toFixed(0)} ms | ${pct(captures, 90).toFixed(0)} ms |`,
        `| a move to the other host (guest paused throughout) | ${r.toFixed(0)} ms | ${pct(moves, 90).toFixed(0)} ms |`,
        `ratio (move / checkpoint, p50): ${(r / c).toFixed(2)}×`,
        '',
      ].join('\n'),
    );
  } finally {
    await api.destroy().catch(() => undefined);
    for (const h of hosts) await h.destroy().catch(() => undefined);
    await db.end().catch(() => undefined);
    postgres.stop();
  }
}

await main();
