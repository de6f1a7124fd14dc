import { test } from 'node:test';
import assert from 'node:assert/strict';
import { RateLimiter } from '../../src/api/rate-limit.js';
import { clientKey } from '../../src/platform/client-key.js';
import { KeyedMutex } from '../../src/core/keyed-mutex.js';

test('token bucket: burst, then refill at the rate, per key', () => {
  const rl = new RateLimiter({ ratePerSec: 2, burst: 3 });
  const t = 1_000_000;
  assert.deepEqual([0, 0, 0].map(() => rl.take('a', t)), [0, 0, 0]);
  assert.ok(rl.take('a', t) >= 1);
  assert.equal(rl.take('b', t), 0, 'another token has its own bucket');
  assert.equal(rl.take('a', t + 500), 0, 'half a second refills one at 2/s');
  assert.equal(new RateLimiter({ ratePerSec: 0, burst: 0 }).take('x'), 0, 'rate 0 disables limiting');
});

test('the buckets are bounded: past 100,000 keys the longest-known are forgotten', () => {
  const rl = new RateLimiter({ ratePerSec: 0.001, burst: 1 });
  const t = 1_000_000;
  assert.equal(rl.take('first', t), 0);
  assert.ok(rl.take('first', t) > 0, 'drained');
  for (let i = 0; i < 100_000; i++) rl.take(`k${i}`, t);
  assert.equal(rl.take('first', t), 0, 'forgotten, so it starts with a fresh burst');
});

test('client keys: IPv4 as it is, mapped IPv4 unwrapped, IPv6 by its /64', () => {
  assert.equal(clientKey('203.0.113.7'), '203.0.113.7');
  assert.equal(clientKey('::ffff:203.0.113.7'), '203.0.113.7');
  assert.equal(clientKey('2001:db8:1:2::1'), '2001:db8:1:2::/64');
  assert.equal(clientKey('2001:0db8:0001:0002:ffff:0:0:9'), '2001:db8:1:2::/64');
  assert.equal(clientKey('2001:db8::1'), '2001:db8:0:0::/64');
  assert.equal(clientKey('fe80::1%eth0'), 'fe80:0:0:0::/64');
  assert.equal(clientKey('::1'), '0:0:0:0::/64');
  assert.equal(clientKey('::'), '0:0:0:0::/64');
});

test('keyed mutex serializes per key and survives failures', async () => {
  const m = new KeyedMutex();
  const order: string[] = [];
  const slow = (tag: string, ms: number) => () => new Promise<void>((r) => setTimeout(() => (order.push(tag), r()), ms));
  await Promise.all([m.run('k', slow('a', 30)), m.run('k', slow('b', 1)), m.run('other', slow('c', 5))]);
  assert.deepEqual(order, ['c', 'a', 'b']);
  await assert.rejects(m.run('k', async () => { throw new Error('x'); }));
  assert.equal(await m.run('k', async () => 42), 42);
});
