/**
 * A VM host's lease on its name (src/cluster/node-lease.ts): the same host, restarted, is itself
 * at once; another host under that name is refused while the lease runs, and the host whose name
 * was taken after its lease ran out is told to stop.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { NodeLease, hostIdentity, type LeaseOptions } from '../../src/cluster/node-lease.js';
import type { NodeRepo } from '../../src/core/ports.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { silentLog } from '../support/api-harness.js';

const capacity = () => ({ memoryMib: 1024, vcpus: 2, runtimes: 10, diskBytes: 10 * 1024 ** 3 });

test('a host id is made once per data directory and kept; a file that holds no id is refused', () => {
  const [a, b] = [mkdtempSync(join(tmpdir(), 'vessel-host-')), mkdtempSync(join(tmpdir(), 'vessel-host-'))];
  try {
    const id = hostIdentity(a);
    assert.match(id, /^[0-9a-f-]{36}$/);
    assert.equal(hostIdentity(a), id, 'the same host after a restart');
    assert.notEqual(hostIdentity(b), id, 'another data directory is another host');
    writeFileSync(join(b, 'host-id'), 'not an id\n');
    assert.throws(() => hostIdentity(b), /does not hold a host id/);
  } finally {
    for (const d of [a, b]) rmSync(d, { recursive: true, force: true });
  }
});

test('a second host under a held name fails to start; once the lease lapses it takes the name, and the first is told to stop', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-lease-'));
  const store = new SqliteStore(join(dir, 'vessel.db'));
  // The first host's way to the store, which a test can cut (a network partition).
  let cut = false;
  const flaky: NodeRepo = { ...store.nodes, renew: (reg, secs) => (cut ? Promise.reject(new Error('the store is away')) : store.nodes.renew(reg, secs)) };
  const taken: Error[] = [];
  const lease = (nodes: NodeRepo, holder: string, leaseSecs: number, onTaken: LeaseOptions['onTaken'] = () => assert.fail('not taken')) =>
    new NodeLease(nodes, { name: 'host-a', holder, internalUrl: `http://${holder}:8082`, ingressAddress: null, leaseSecs, capacity, onTaken }, silentLog);
  try {
    const restarted = lease(store.nodes, 'first', 0.6);
    await restarted.start();
    await restarted.stop();
    const first = lease(flaky, 'first', 0.6, (err) => taken.push(err));
    await first.start();
    assert.equal((await store.nodes.find('host-a'))?.holder, 'first', 'the same host, restarted at once, is itself');
    await assert.rejects(lease(store.nodes, 'second', 30).start(), /VM host name 'host-a' is held by another host .* give each VM host its own VESSEL_NODE_NAME/);
    assert.equal((await store.nodes.find('host-a'))?.internalUrl, 'http://first:8082', 'the refused one changed nothing');

    // Cut off, the first host's lease lapses; the second takes the name.
    cut = true;
    await new Promise((r) => setTimeout(r, 800));
    const second = lease(store.nodes, 'second', 30);
    await second.start();
    assert.equal((await store.nodes.find('host-a'))?.holder, 'second');
    // Back, the first one's next renewal is refused: it is told to stop acting for the name.
    cut = false;
    for (let i = 0; i < 50 && taken.length === 0; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(taken.length, 1);
    assert.match(taken[0]!.message, /held by another host/);
    assert.equal((await store.nodes.find('host-a'))?.holder, 'second');
    await second.stop();
    await first.stop();
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
