/** Placement of a new runtime over a fleet's VM hosts (src/cluster/placement.ts). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { addLoad, MIN_FREE_DISK_BYTES, placeRuntime } from '../../src/cluster/placement.js';
import type { NodeLoad, VmNode } from '../../src/core/types.js';

const node = (name: string, over: Partial<VmNode> = {}, memoryMib = 16_384): VmNode => ({
  name,
  holder: `id-of-${name}`,
  internalUrl: `http://${name}:8082`,
  ingressAddress: `${name}:8081`,
  capacity: { memoryMib, vcpus: 8, runtimes: 100, diskBytes: 100 * 1024 ** 3 },
  draining: false,
  alive: true,
  leaseExpiresAt: '2026-11-23T00:00:15.000Z',
  registeredAt: '2026-11-23T00:00:00.000Z',
  ...over,
});
const demand = { memoryMib: 512, vcpus: 1 };
const chosen = (nodes: VmNode[], load: Map<string, NodeLoad> = new Map()) => {
  const c = placeRuntime(nodes, load, demand);
  return typeof c === 'string' ? c : c.name;
};

test('the host with the larger share of its memory free wins; equal hosts alternate', () => {
  const nodes = [node('a'), node('b')];
  const load = new Map<string, NodeLoad>();
  const order: string[] = [];
  for (let i = 0; i < 6; i++) {
    const name = chosen(nodes, load);
    order.push(name);
    addLoad(load, name, demand, 1);
  }
  assert.deepEqual(order, ['a', 'b', 'a', 'b', 'a', 'b']);
  // Shares, not MiB: an empty big host first, then the small one once the big one's share free is the smaller.
  assert.equal(chosen([node('small', {}, 8192), node('big', {}, 32_768)]), 'big');
  assert.equal(chosen([node('small', {}, 8192), node('big', {}, 32_768)], new Map([['big', { memoryMib: 4096, vcpus: 8, runtimes: 8 }]])), 'small');
});

test('hosts without a lease, draining, full, or short of disk or slots take nothing', () => {
  assert.equal(chosen([node('a', { alive: false }), node('b')]), 'b');
  assert.equal(chosen([node('a', { draining: true }), node('b')]), 'b');
  assert.equal(chosen([node('a', { capacity: { memoryMib: 16_384, vcpus: 8, runtimes: 100, diskBytes: MIN_FREE_DISK_BYTES - 1 } }), node('b')]), 'b');
  assert.equal(chosen([node('a', { capacity: { memoryMib: 16_384, vcpus: 8, runtimes: 1, diskBytes: 100 * 1024 ** 3 } }), node('b')], new Map([['a', { memoryMib: 0, vcpus: 0, runtimes: 1 }]])), 'b');
  assert.equal(chosen([node('a', {}, 256)]), 'no VM host has 512 MiB of memory, a runtime slot and 2 GiB of disk free');
  assert.equal(chosen([node('a', { alive: false })]), 'no VM host holds a lease');
  assert.equal(chosen([node('a', { draining: true })]), 'every VM host is draining');
  assert.equal(chosen([]), 'no VM host holds a lease');
});

test('addLoad adds and takes back a placement, and forgets a host left with none', () => {
  const load = new Map<string, NodeLoad>();
  addLoad(load, 'a', demand, 1);
  addLoad(load, 'a', demand, 1);
  assert.deepEqual(load.get('a'), { memoryMib: 1024, vcpus: 2, runtimes: 2 });
  addLoad(load, 'a', demand, -1);
  addLoad(load, 'a', demand, -1);
  assert.equal(load.has('a'), false);
});
