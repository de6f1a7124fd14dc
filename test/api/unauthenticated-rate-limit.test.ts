/**
 * Requests without a valid token (missing, malformed or rejected) draw on a bucket per client
 * address; over it they get 429 before the store is asked about their token. A valid token
 * keeps its own bucket.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { apiHarness } from '../support/api-harness.js';

test('missing, malformed and rejected tokens share a bucket per address; over it, 429 before any lookup', async () => {
  const h = await apiHarness({ unauthenticatedRate: { ratePerSec: 0.01, burst: 3 } });
  try {
    let lookups = 0;
    const findByHash = h.store.tokens.findByHash.bind(h.store.tokens);
    h.store.tokens.findByHash = async (hash) => {
      lookups++;
      return findByHash(hash);
    };
    const from = (remoteAddress: string, authorization?: string) =>
      h.app.inject({ method: 'GET', url: '/v1/runtimes', remoteAddress, headers: authorization === undefined ? {} : { authorization } });

    const statuses = [];
    for (const authorization of [undefined, 'Basic abc', 'Bearer vsl_not_a_token']) statuses.push((await from('203.0.113.7', authorization)).statusCode);
    assert.deepEqual(statuses, [401, 401, 401]);
    assert.equal(lookups, 1, 'only the well-formed token was looked up');

    const limited = await from('203.0.113.7', 'Bearer vsl_another_guess');
    assert.equal(limited.statusCode, 429);
    assert.equal(JSON.parse(limited.body).error.code, 'rate_limited');
    assert.ok(Number(limited.headers['retry-after']) >= 1);
    assert.equal(lookups, 1, 'refused before the store was asked');
    assert.equal((await from('203.0.113.7')).statusCode, 429);

    assert.equal((await from('198.51.100.1', 'Bearer vsl_guess')).statusCode, 401, 'another address has its own bucket');
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
