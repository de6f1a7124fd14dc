/**
 * What having a secret unsealed by an API node costs an enrolled VM host (docs/scaling.md,
 * "Secrets on VM hosts"), per connection of a rule whose secret is not cached (`cache_ttl_secs`
 * 0), in one invocation on one machine with a PostgreSQL the bench starts: the host's request to
 * an API node (the real API in this process, over loopback HTTP), against what a host holding the
 * master key does instead (the same secret read from the same PostgreSQL and opened here). Taken
 * in turn, one of each at a time, so drift touches both alike. Reported: p50 and p99 of each, and
 * their ratio.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { FleetKeys, hostKey } from '../src/cluster/fleet-keys.js';
import { ApiNodeUnsealer, unsealRoutes } from '../src/cluster/secret-unsealing.js';
import { PostgresStore } from '../src/store/postgres-store.js';
import { apiHarness, silentLog } from '../test/support/api-harness.js';
import { startPostgres } from '../test/support/postgres-cluster.js';
import { runtime } from '../test/store/store-contract.js';

const CALLS = Number(process.env.BENCH_CALLS ?? 2000);
const WARMUP = 100;

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;

async function main(): Promise<void> {
  const postgres = startPostgres();
  const fleetSecret = randomBytes(32).toString('hex');
  const store = await PostgresStore.open(await postgres.createDatabase('bench'));
  const api = await apiHarness({ store, fleet: (core) => ({ routes: unsealRoutes(core, new FleetKeys(fleetSecret)) }) });
  try {
    const url = await api.app.listen({ host: '127.0.0.1', port: 0 });
    await store.nodes.renew({ name: 'host-1', holder: randomUUID(), internalUrl: 'https://host-1:8082', ingressAddress: null, capacity: { memoryMib: 1024, vcpus: 1, runtimes: 1, diskBytes: 1e10 } }, 3600);
    const secret = await api.core.secrets.create('acme', { name: 'key', value: `sk-${randomBytes(24).toString('hex')}` });
    const rt = { ...runtime('acme', 'web'), node: 'host-1' };
    await store.runtimes.insert(rt);
    await store.rules.insert({ id: randomUUID(), tenantId: 'acme', runtimeId: rt.id, secretId: secret.id, hostPattern: 'api.test', pathPattern: '/**', injection: { headerName: 'Authorization' }, createdAt: new Date().toISOString() });
    const unsealer = new ApiNodeUnsealer([url], 'host-1', hostKey(fleetSecret, 'host-1'), silentLog);
    const asked: number[] = [];
    const opened: number[] = [];
    for (let i = 0; i < WARMUP + CALLS; i++) {
      let t = performance.now();
      if ((await unsealer.unseal('acme', secret.id)) === null) throw new Error('unsealed nothing');
      if (i >= WARMUP) asked.push(performance.now() - t);
      t = performance.now();
      if ((await api.core.secrets.reveal('acme', secret.id)) === null) throw new Error('opened nothing');
      if (i >= WARMUP) opened.push(performance.now() - t);
    }
    const ms = (x: number) => `${x.toFixed(2)} ms`;
    process.stdout.write(
      [
        `${CALLS} secrets, one at a time (after ${WARMUP} not counted), PostgreSQL on a unix socket, the API node on loopback HTTP`,
        '| | p50 | p99 |',
        '|---|---|---|',
        `| unsealed by an API node (enrolled host) | ${ms(pct(asked, 50))} | ${ms(pct(asked, 99))} |`,
        `| opened with the master key (host given it) | ${ms(pct(opened, 50))} | ${ms(pct(opened, 99))} |`,
        `| ratio | ${(pct(asked, 50) / pct(opened, 50)).toFixed(2)}× | ${(pct(asked, 99) / pct(opened, 99)).toFixed(2)}× |`,
        '',
      ].join('\n'),
    );
  } finally {
    await api.close();
    postgres.stop();
  }
}

await main();
