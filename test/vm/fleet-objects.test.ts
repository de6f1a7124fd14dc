/**
 * A checkpoint outlives its VM host (issue 30 §1): a fleet on one machine (PostgreSQL, one API
 * node, two VM hosts) with object storage, Ceph's RADOS Gateway on a throwaway single-node
 * cluster (test/support/ceph-rgw.ts). A checkpoint made on one host is uploaded once ready; that
 * host is then lost, its process killed and its data directory removed; a fork of the
 * checkpoint lands on the other host, which restores it from the bucket, and the guest's files
 * are what they were.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { existsSync, rmSync } from 'node:fs';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../support/postgres-cluster.js';
import { startRadosGateway, type S3Server } from '../support/ceph-rgw.js';
import { killProcessesUnder, Service, type Reply } from '../support/service.js';
import { until } from '../support/waiting.js';

const TIMEOUT = { timeout: 900_000 };
/** Short, so the lost host's lease runs out soon. */
const LEASE_SECS = 6;

let postgres: PostgresCluster;
let s3: S3Server;
let db: pg.Client;
let api: Service;
let hosts: Service[];

before(async () => {
  postgres = startPostgres();
  s3 = await startRadosGateway();
  const url = await postgres.createDatabase('objects');
  db = new pg.Client({ connectionString: url });
  await db.connect();
  const shared = {
    VESSEL_ADMIN_TOKEN: `vsl_test_${randomBytes(12).toString('hex')}`,
    VESSEL_WARM_POOL: '0',
    VESSEL_NODE_LEASE_SECS: String(LEASE_SECS),
    VESSEL_DATABASE_URL: url,
    VESSEL_INTERNAL_SECRET: randomBytes(32).toString('hex'),
    VESSEL_MASTER_KEY: randomBytes(32).toString('hex'),
  };
  api = new Service(shared, undefined, [], ['--role', 'api']);
  await api.start();
  // Hosts that hold the fleet secret (not enrolled): what this test is about is their files.
  const objects = {
    VESSEL_OBJECT_STORE_URL: s3.endpoint,
    VESSEL_OBJECT_STORE_BUCKET: 'vessel-checkpoints',
    VESSEL_OBJECT_STORE_ACCESS_KEY_ID: s3.accessKeyId,
    VESSEL_OBJECT_STORE_SECRET_ACCESS_KEY: s3.secretAccessKey,
  };
  hosts = ['host-1', 'host-2'].map((name) => new Service({ ...shared, ...objects, VESSEL_NODE_NAME: name }, undefined, [], ['--role', 'node']));
  await Promise.all(hosts.map((h) => h.start()));
});

after(async () => {
  await api?.destroy().catch(() => undefined);
  for (const h of hosts ?? []) await h.destroy().catch(() => undefined);
  await db?.end().catch(() => undefined);
  postgres?.stop();
  s3?.stop();
});

const ok = (r: Reply, status = 200): any => {
  assert.equal(r.status, status, JSON.stringify(r.body));
  return r.body.data;
};

test('a checkpoint whose host is lost, files and all, is forked on another host from object storage', TIMEOUT, async () => {
  ok(await api.call('POST', '/v1/runtimes', { display_name: 'source' }), 201);
  ok(await api.call('POST', '/v1/runtimes/source/exec', { command: 'echo kept-in-the-bucket > /root/mark' }));
  const cp = ok(await api.call('POST', '/v1/runtimes/source/checkpoints', { name: 'snap' }), 201);
  await until('the checkpoint is ready and stored', 600_000, async () => {
    const row = (await db.query('SELECT state, state_message, archive_digest FROM checkpoints WHERE id = $1', [cp.id])).rows[0];
    assert.notEqual(row?.state, 'failed', row?.state_message);
    return row?.archive_digest !== null && row?.state === 'ready' ? true : undefined;
  });
  const holder = (await db.query('SELECT node FROM checkpoints WHERE id = $1', [cp.id])).rows[0].node as string;
  const [lost, other] = holder === 'host-1' ? [hosts[0]!, hosts[1]!] : [hosts[1]!, hosts[0]!];

  // The host is lost: its process and VMs killed, its data directory gone.
  await lost.kill9();
  killProcessesUnder(lost.dataDir);
  rmSync(lost.dataDir, { recursive: true, force: true });
  await until("the lost host's runtime reads unavailable", 4 * LEASE_SECS * 1000, async () =>
    ok(await api.call('GET', '/v1/runtimes/source')).status === 'unavailable' ? true : undefined,
  );

  const fork = await api.call('POST', '/v1/runtimes', { display_name: 'fork', checkpoint: 'snap' });
  // What went wrong is in the services' logs, which go with them.
  assert.equal(fork.status, 201, `${JSON.stringify(fork.body)}\nAPI node:\n${api.log.slice(-3000)}\nother host:\n${other.log.slice(-6000)}`);
  const node = (await db.query("SELECT node FROM runtimes WHERE display_name = 'fork'")).rows[0].node as string;
  assert.notEqual(node, holder);
  assert.equal((await db.query('SELECT node FROM checkpoints WHERE id = $1', [cp.id])).rows[0].node, node, 'the checkpoint is the new host\'s now');
  const mark = ok(await api.call('POST', '/v1/runtimes/fork/exec', { command: 'cat /root/mark' }));
  // Its files could come from nowhere but the bucket: the lost host's directory is gone.
  assert.equal(existsSync(lost.dataDir), false);
  assert.equal(mark.stdout, 'kept-in-the-bucket\n');
});
