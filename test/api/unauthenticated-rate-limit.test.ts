/**
 * Requests without a valid token (missing, malformed or rejected) draw on a bucket per client
 * address; over it they get 429. A valid token is never refused for its address (many clients
 * share one behind a proxy or NAT) and keeps its own bucket. The store is protected by what a
 * token is instead: one that cannot be ours by its shape is never looked up, one refused a moment
 * ago is not looked up again, and one token's concurrent requests share a lookup.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiHarness } from '../support/api-harness.js';
import { generateTokenValue, hashToken } from '../../src/core/tokens.js';
import type { Store, TokenRepo } from '../../src/core/ports.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';

/** A store whose token lookups are counted, by hash; everything else is the SQLite store's. */
function countingStore(): { store: Store; lookups: string[] } {
  const inner = new SqliteStore(join(mkdtempSync(join(tmpdir(), 'vessel-counting-')), 'vessel.db'));
  const lookups: string[] = [];
  const tokens: TokenRepo = {
    insert: (t) => inner.tokens.insert(t),
    put: (t) => inner.tokens.put(t),
    findByHash: (hash) => {
      lookups.push(hash);
      return inner.tokens.findByHash(hash);
    },
    findById: (id) => inner.tokens.findById(id),
    list: () => inner.tokens.list(),
    page: (f) => inner.tokens.page(f),
    revoke: (id, at) => inner.tokens.revoke(id, at),
  };
  const store = new Proxy(inner, {
    get(target, key) {
      if (key === 'tokens') return tokens;
      const value: unknown = Reflect.get(target, key, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
  return { store, lookups };
}

test('missing, malformed and rejected tokens share a bucket per address; over it, 429', async () => {
  const { store, lookups } = countingStore();
  const h = await apiHarness({ store, unauthenticatedRate: { ratePerSec: 0.01, burst: 3 } });
  try {
    const from = (remoteAddress: string, authorization?: string) =>
      h.app.inject({ method: 'GET', url: '/v1/runtimes', remoteAddress, headers: authorization === undefined ? {} : { authorization } });

    const statuses = [];
    for (const authorization of [undefined, 'Basic abc', `Bearer ${generateTokenValue()}`]) statuses.push((await from('203.0.113.7', authorization)).statusCode);
    assert.deepEqual(statuses, [401, 401, 401]);
    assert.equal(lookups.length, 1, 'only the well-formed token was looked up');

    const limited = await from('203.0.113.7', `Bearer ${generateTokenValue()}`);
    assert.equal(limited.statusCode, 429);
    assert.equal(JSON.parse(limited.body).error.code, 'rate_limited');
    assert.ok(Number(limited.headers['retry-after']) >= 1);
    assert.equal((await from('203.0.113.7')).statusCode, 429);

    assert.equal((await from('198.51.100.1', `Bearer ${generateTokenValue()}`)).statusCode, 401, 'another address has its own bucket');
    assert.equal((await from('2001:db8:1:2::1')).statusCode, 401);
    for (let i = 0; i < 2; i++) await from('2001:db8:1:2::1');
    assert.equal((await from('2001:db8:1:2:ffff::9')).statusCode, 429, 'an IPv6 /64 is one client');
  } finally {
    await h.close();
  }
});

test('a valid token is never charged to its address, and keeps its own bucket', async () => {
  const h = await apiHarness({ unauthenticatedRate: { ratePerSec: 0.01, burst: 2 }, rate: { ratePerSec: 0.01, burst: 5 } });
  try {
    const tokens = await Promise.all([1, 2, 3, 4].map(() => h.token('acme', ['runtimes:read'])));
    const get = (token?: string) =>
      h.app.inject({ method: 'GET', url: '/v1/runtimes', remoteAddress: '203.0.113.9', headers: token === undefined ? {} : { authorization: `Bearer ${token}` } });
    // Four valid tokens looked up for the first time: more than the address's burst of failures.
    for (const token of tokens) assert.equal((await get(token)).statusCode, 200);
    assert.equal((await get()).statusCode, 401, 'the address still has its whole allowance');
    assert.equal((await get()).statusCode, 401);
    assert.equal((await get()).statusCode, 429);
    // A cached valid token passes, on its own bucket: 4 more, then its burst of 5 is spent.
    const statuses = [];
    for (let i = 0; i < 5; i++) statuses.push((await get(tokens[0])).statusCode);
    assert.deepEqual(statuses, [200, 200, 200, 200, 429]);
    assert.match(JSON.parse((await get(tokens[0])).body).error.message, /for this token/);
  } finally {
    await h.close();
  }
});

test('a stranger sending bad tokens from a shared address does not lock out a valid token from it', async () => {
  const h = await apiHarness({ unauthenticatedRate: { ratePerSec: 0.01, burst: 20 } });
  try {
    const proxy = '203.0.113.5';
    const get = (authorization: string) => h.app.inject({ method: 'GET', url: '/v1/runtimes', remoteAddress: proxy, headers: { authorization } });
    const statuses: number[] = [];
    for (let i = 0; i < 30; i++) statuses.push((await get(i % 3 === 0 ? 'Bearer nonsense' : `Bearer ${generateTokenValue()}`)).statusCode);
    assert.deepEqual(statuses.slice(0, 20), new Array(20).fill(401));
    assert.deepEqual(statuses.slice(20), new Array(10).fill(429), "the stranger has spent the address's failures");

    // A valid token never seen before (not in the cache) from the same address.
    const valid = await h.token('acme', ['runtimes:read']);
    const res = await get(`Bearer ${valid}`);
    assert.equal(res.statusCode, 200, res.body);
    assert.equal((await get(`Bearer ${await h.token('acme', ['runtimes:read'])}`)).statusCode, 200);
    assert.equal((await get(`Bearer ${generateTokenValue()}`)).statusCode, 429, 'failures from there are still refused');
  } finally {
    await h.close();
  }
});

test('a flood of bad tokens reaches the store once per distinct token; one token at once shares a lookup', async () => {
  const { store, lookups } = countingStore();
  // No address bucket at all: what keeps the store's load down is the token checks alone.
  const h = await apiHarness({ store });
  try {
    const bad = [1, 2, 3, 4, 5].map(() => generateTokenValue());
    const get = (token: string, remoteAddress = '198.51.100.7') =>
      h.app.inject({ method: 'GET', url: '/v1/runtimes', remoteAddress, headers: { authorization: `Bearer ${token}` } });
    const concurrent = await Promise.all(Array.from({ length: 200 }, (_, i) => get(bad[i % bad.length]!, `198.51.100.${i % 50}`)));
    assert.ok(concurrent.every((r) => r.statusCode === 401));
    for (let i = 0; i < 100; i++) assert.equal((await get(bad[i % bad.length]!)).statusCode, 401);
    for (const res of concurrent.slice(0, 5)) {
      const body = JSON.parse(res.body);
      assert.deepEqual(body, { error: { code: 'unauthenticated', message: 'the bearer token was not accepted' } });
    }
    const perToken = bad.map((t) => lookups.filter((hash) => hash === hashToken(t)).length);
    assert.deepEqual(perToken, [1, 1, 1, 1, 1], '300 requests, 5 distinct tokens, 5 store reads');

    // A valid token's first 20 concurrent requests: one read.
    const valid = await h.token('acme', ['runtimes:read']);
    const before = lookups.length;
    const ok = await Promise.all(Array.from({ length: 20 }, () => get(valid)));
    assert.ok(ok.every((r) => r.statusCode === 200));
    assert.equal(lookups.length - before, 1);
  } finally {
    await h.close();
  }
});

test('a token that cannot be ours by its shape never reaches the store; a custom admin token still works', async () => {
  const { store, lookups } = countingStore();
  const admin = 'vsl_test_custom-admin-0123';
  const h = await apiHarness({ store, adminToken: admin });
  try {
    const real = generateTokenValue();
    const malformed = [
      'vsl_short',
      'abc',
      real.slice(0, -1), // one character short
      `${real}A`, // one too many
      `xyz_${real.slice(4)}`, // another prefix
      `vsl_${'A'.repeat(42)}B`, // a last character 32 random bytes cannot end in
      `vsl_${'A'.repeat(42)}=`,
      `${admin}X`, // near the admin token is not the admin token
      'x'.repeat(512),
    ];
    for (const token of malformed) {
      const res = await h.app.inject({ method: 'GET', url: '/v1/runtimes', headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.statusCode, 401, token);
      assert.equal(JSON.parse(res.body).error.message, 'the bearer token was not accepted');
      assert.ok(!res.body.includes(token), 'the token is not echoed');
    }
    assert.equal(lookups.length, 0, 'none was looked up');

    // The bootstrap admin token may be any string the operator chose, and is looked up as usual.
    const res = await h.app.inject({ method: 'GET', url: '/v1/runtimes', headers: { authorization: `Bearer ${admin}` } });
    assert.equal(res.statusCode, 200);
    assert.equal(lookups.length, 1);
  } finally {
    await h.close();
  }
});
