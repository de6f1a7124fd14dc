import { test } from 'node:test';
import assert from 'node:assert/strict';
import { FAILED_TOKEN_LIMITS, FailedTokens } from '../../src/api/failed-tokens.js';

test('failed tokens are remembered for the TTL', () => {
  const f = new FailedTokens({ entries: 10, bytes: 10_000, ttlMs: 1000 });
  const t = 1_000_000;
  f.add('a', t);
  assert.equal(f.has('a', t + 999), true);
  assert.equal(f.has('a', t + 1000), false, 'expired');
  assert.equal(f.size, 0, 'and forgotten');
  assert.equal(f.bytes, 0);
});

test('bounded in entries: the least recently seen go first', () => {
  const f = new FailedTokens({ entries: 3, bytes: 10_000, ttlMs: 60_000 });
  const t = 1_000_000;
  for (const k of ['a', 'b', 'c']) f.add(k, t);
  assert.equal(f.has('a', t), true, 'a is now the most recently seen');
  f.add('d', t);
  assert.equal(f.size, 3);
  assert.equal(f.has('b', t), false, 'b went first');
  assert.deepEqual(['a', 'c', 'd'].map((k) => f.has(k, t)), [true, true, true]);
});

test('bounded in bytes, whatever the tokens', () => {
  const f = new FailedTokens({ entries: 1_000_000, bytes: 4096, ttlMs: 60_000 });
  const t = 1_000_000;
  for (let i = 0; i < 1000; i++) f.add(`${i}`.padEnd(500, 'x'), t);
  assert.ok(f.bytes <= 4096, `${f.bytes} bytes`);
  assert.ok(f.size >= 1 && f.size <= 8);
  f.add('y'.repeat(5000), t);
  assert.equal(f.has('y'.repeat(5000), t), false, 'one larger than the whole bound is not kept');
  assert.ok(f.bytes <= 4096);
});

test('the defaults hold 10,000 of our tokens within about 1 MiB', () => {
  const f = new FailedTokens();
  for (let i = 0; i < 20_000; i++) f.add(`vsl_${String(i).padStart(43, 'A')}`);
  assert.ok(f.size <= FAILED_TOKEN_LIMITS.entries);
  assert.ok(f.bytes <= FAILED_TOKEN_LIMITS.bytes);
});
