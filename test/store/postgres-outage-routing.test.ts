/**
 * Ingress through an API node goes on while PostgreSQL is down (issue 30 §4; docs/scaling.md,
 * "What fails when"): the entry routes each request by the runtime's host as last read, and the
 * hosts are as the node directory last read them. A real PostgreSQL, stopped and started again
 * under the entry, as a failover does; the VM host is test/support/fake-host-ingress.ts.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect } from 'node:net';
import { IngressEntry } from '../../src/cluster/ingress-entry.js';
import { FleetKeys } from '../../src/cluster/fleet-keys.js';
import { NodeDirectory } from '../../src/core/node-directory.js';
import { PostgresStore } from '../../src/store/postgres-store.js';
import { quietLog } from '../support/egress-harness.js';
import { fakeHostIngress, type FakeHostIngress } from '../support/fake-host-ingress.js';
import { startPostgres, type PostgresCluster } from '../support/postgres-cluster.js';
import { freePort } from '../support/service.js';
import { runtime } from './store-contract.js';

const LEASE_SECS = 60;
let cluster: PostgresCluster;
let store: PostgresStore;
let host: FakeHostIngress;
let directory: NodeDirectory;
let entry: IngressEntry;
let port = 0;
const known = { ...runtime('acme', 'served'), node: 'host-1', ingressSpecs: [{ protocol: 'http' as const, runtime_port: 8000 }] };

before(async () => {
  cluster = startPostgres();
  store = await PostgresStore.open(await cluster.createDatabase('outage'));
  host = await fakeHostIngress();
  await store.nodes.renew({ name: 'host-1', holder: randomUUID(), internalUrl: 'https://host-1:8082', ingressAddress: host.address, capacity: { memoryMib: 4096, vcpus: 2, runtimes: 10, diskBytes: 1e11 } }, LEASE_SECS);
  await store.runtimes.insert(known);
  directory = new NodeDirectory(store.nodes, { leaseMs: LEASE_SECS * 1000 });
  entry = new IngressEntry({ store, nodes: directory, domain: 'localhost', keys: new FleetKeys('d'.repeat(40)), fleetCa: () => Promise.reject(new Error('no https here')), trustedProxies: [], log: quietLog as never });
  port = await freePort();
  await entry.listen('127.0.0.1', port);
});

after(async () => {
  await entry.close();
  host.close();
  directory.close();
  await store.close();
  cluster.stop();
});

/** One client connection's requests, one at a time: each answer's status line and body. */
function visitor() {
  const socket = connect({ host: '127.0.0.1', port });
  let text = '';
  socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
  socket.on('error', () => undefined);
  return {
    async get(runtimeId: string, path: string): Promise<string> {
      const from = text.length;
      socket.write(`GET ${path} HTTP/1.1\r\nHost: 8000-${runtimeId}.localhost\r\n\r\n`);
      const deadline = Date.now() + 10_000;
      while (!/\r\n\r\n[\s\S]+/.test(text.slice(from)) && Date.now() < deadline && !socket.destroyed) await new Promise((r) => setTimeout(r, 20));
      return text.slice(from);
    },
    close: () => socket.destroy(),
  };
}

test('a kept connection and a new one reach their runtime while PostgreSQL is stopped, and after it is back', async () => {
  const kept = visitor();
  assert.match(await kept.get(known.id, '/before'), /^HTTP\/1\.1 200 [\s\S]*fast$/);

  cluster.pause();
  try {
    assert.match(await kept.get(known.id, '/during-kept'), /^HTTP\/1\.1 200 [\s\S]*fast$/, 'on the connection that was open');
    const fresh = visitor();
    assert.match(await fresh.get(known.id, '/during-new'), /^HTTP\/1\.1 200 [\s\S]*fast$/, 'on a connection opened during the outage');
    fresh.close();
    // A runtime never read before has no route to stand in: its request is not answered as found.
    const unknown = visitor();
    assert.doesNotMatch(await unknown.get(randomUUID(), '/never-read'), /^HTTP\/1\.1 200/);
    unknown.close();
  } finally {
    cluster.resume();
  }
  // The store answers again: a new read, and the same route.
  const after = visitor();
  assert.match(await after.get(known.id, '/after'), /^HTTP\/1\.1 200 [\s\S]*fast$/);
  after.close();
  kept.close();
  assert.deepEqual(host.seen.filter((s) => s.startsWith('GET /')).map((s) => s.slice(4)).filter((p) => p !== '/never-read'), ['/before', '/during-kept', '/during-new', '/after']);
});
