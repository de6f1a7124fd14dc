/**
 * No host is taken for lost until the store has answered again for a full lease period after an
 * outage (docs/scaling.md, "Failure modes"): a host whose lease ran out while nobody could renew
 * counts as alive for that long; one whose lease had run out before the outage stays lost. During
 * the outage, the hosts are as the last read found them.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NodeDirectory } from '../../src/core/node-directory.js';
import type { NodeRepo } from '../../src/core/ports.js';
import type { VmNode } from '../../src/core/types.js';

const LEASE_MS = 15_000;
const t0 = Date.parse('2026-11-28T05:00:00Z');

function host(name: string, leaseExpiresAt: number, now: number): VmNode {
  return {
    name,
    holder: `h-${name}`,
    internalUrl: `https://${name}:8082`,
    ingressAddress: null,
    capacity: { memoryMib: 1024, vcpus: 2, runtimes: 100, diskBytes: 10 ** 10 },
    draining: false,
    alive: leaseExpiresAt > now,
    leaseExpiresAt: new Date(leaseExpiresAt).toISOString(),
    registeredAt: new Date(t0).toISOString(),
  };
}

/** A store whose hosts are `a`, renewed until the outage, and `b`, lost a minute before it. */
function fleet() {
  let now = t0;
  let down = false;
  const leases = new Map([['a', t0 + LEASE_MS], ['b', t0 - 60_000]]);
  const nodes = {
    list: async () => {
      if (down) throw new Error('connect ECONNREFUSED /var/run/postgresql/.s.PGSQL.5432');
      return [...leases].map(([name, until]) => host(name, until, now));
    },
  } as unknown as NodeRepo;
  const directory = new NodeDirectory(nodes, { leaseMs: LEASE_MS, now: () => now });
  const alive = async () => (await directory.list()).filter((n) => n.alive).map((n) => n.name);
  return {
    directory,
    alive,
    at: (ms: number) => (now = t0 + ms),
    down: (isDown: boolean) => (down = isDown),
    renew: (name: string) => leases.set(name, now + LEASE_MS),
  };
}

test('without an outage, a lease that ran out is a lost host', async () => {
  const f = fleet();
  assert.deepEqual(await f.alive(), ['a']);
  f.at(20_000);
  assert.deepEqual(await f.alive(), []);
});

test('after an outage, a host whose lease ran out meanwhile is alive for a lease period; one lost before stays lost', async () => {
  const f = fleet();
  f.at(5_000);
  assert.deepEqual(await f.alive(), ['a']);
  f.down(true);
  f.at(8_000);
  assert.deepEqual(await f.alive(), ['a'], 'during an outage the hosts are as last read: routes to them go on');
  f.at(40_000);
  assert.deepEqual(await f.alive(), ['a'], 'and no host is taken for lost while nobody can renew');
  f.down(false);
  f.at(42_000);
  assert.deepEqual(await f.alive(), ['a'], "a's lease ran out at 15 s, during the outage: not lost yet");
  f.at(42_000 + LEASE_MS - 2_000);
  assert.deepEqual(await f.alive(), ['a'], 'still within the grace');
  f.at(42_000 + LEASE_MS + 1);
  assert.deepEqual(await f.alive(), [], 'a full lease period after the store came back, a host that never renewed is lost');
});

test('a host that renews after the outage is alive on its own lease, past the grace', async () => {
  const f = fleet();
  f.at(5_000);
  await f.alive();
  f.down(true);
  f.at(10_000);
  await f.alive();
  f.down(false);
  f.at(30_000);
  assert.deepEqual(await f.alive(), ['a']);
  f.renew('a');
  f.at(44_000);
  assert.deepEqual(await f.alive(), ['a']);
});

test('an outage before anything was read is an error, not an empty fleet; the next read after it tries the store again', async () => {
  const f = fleet();
  f.down(true);
  await assert.rejects(f.directory.list(), /ECONNREFUSED/);
  f.down(false);
  assert.deepEqual(await f.alive(), ['a']);
});
