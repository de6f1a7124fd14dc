/**
 * Audit retention is per tenant, with a floor per runtime: a guest that floods denied
 * connections evicts nothing of another tenant's audits, and its sibling runtimes keep their
 * newest ones. The real retention (100,000 per tenant, 1,000 per runtime) is used.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import type { Audit } from '../../src/core/types.js';
import { apiHarness } from '../support/api-harness.js';

const audits = (tenantId: string, runtimeId: string, n: number): Audit[] =>
  Array.from({ length: n }, () => ({
    id: randomUUID(),
    tenantId,
    runtimeId,
    category: 'egress',
    createdAt: new Date().toISOString(),
    payload: { egress: { kind: 'tcp_connection', tcp_connection: { action: 'deny', host: 'flood.example', ip: null, port: 443, reason: 'host_not_allowed' } } },
  }));

test('a flood from one runtime evicts nothing of another tenant and leaves its sibling runtimes their floor', async () => {
  const h = await apiHarness();
  try {
    const acme = await h.token('acme', ['admin']);
    const bob = await h.token('bob', ['admin']);
    const noisy = (await h.call('POST', '/v1/runtimes', { display_name: 'noisy' }, acme)).body.data.id;
    const quiet = (await h.call('POST', '/v1/runtimes', { display_name: 'quiet' }, acme)).body.data.id;
    const sparse = (await h.call('POST', '/v1/runtimes', { display_name: 'sparse' }, acme)).body.data.id;
    const bobs = (await h.call('POST', '/v1/runtimes', { display_name: 'bobs' }, bob)).body.data.id;
    const gone = randomUUID(); // a runtime of acme's deleted since: no floor

    // The oldest audits first, then the flood.
    const quietAudits = audits('acme', quiet, 1500);
    await h.core.audits.record([...audits('bob', bobs, 5), ...quietAudits, ...audits('acme', sparse, 7), ...audits('acme', gone, 10)]);
    await h.core.audits.record(audits('acme', noisy, 101_000));
    await h.core.audits.prune();

    const count = async (token: string, runtime: string) => (await h.call('GET', `/v1/audits?runtime=${runtime}&limit=1000`, undefined, token)).body.data.length;
    assert.equal(await count(bob, bobs), 5, "another tenant's audits are untouched");
    assert.equal(await count(acme, sparse), 7, 'a runtime with fewer audits than the floor keeps them all');
    assert.equal(await count(acme, gone), 0, "a deleted runtime's audits go with the tenant's oldest");
    const quietKept = (await h.call('GET', `/v1/audits?runtime=${quiet}&limit=1000`, undefined, acme)).body.data;
    assert.equal(quietKept.length, 1000, 'the sibling keeps its floor');
    assert.deepEqual(quietKept.map((a: Audit) => a.id), quietAudits.slice(-1000).reverse().map((a) => a.id), 'its newest ones');
    // The store answers any limit (the API pages at most 1000).
    const kept = (await h.store.audits.list('acme', { limit: 1_000_000 })).items;
    assert.equal(kept.length, 100_000 + 1000 + 7, "the tenant keeps its newest 100,000, plus its runtimes' floors");
    assert.equal(kept.filter((a) => a.runtimeId === noisy).length, 100_000);
  } finally {
    await h.close();
  }
});

test('only tenants that recorded audits since their last prune are pruned', async () => {
  const h = await apiHarness();
  try {
    const pruned: string[][] = [];
    const prune = h.store.audits.prune.bind(h.store.audits);
    h.store.audits.prune = async (tenants, retention) => {
      pruned.push([...tenants]);
      return prune(tenants, retention);
    };
    await h.core.audits.record([...audits('busy', randomUUID(), 6000), ...audits('idle', randomUUID(), 3)]);
    await h.core.audits.prune();
    await h.core.audits.prune();
    await h.core.audits.record(audits('busy', randomUUID(), 10));
    await h.core.audits.prune();
    assert.deepEqual(pruned, [['busy']], 'a prune only for the tenant with enough new audits, and only once');
  } finally {
    await h.close();
  }
});

