/**
 * VESSEL_TRUSTED_PROXIES: X-Forwarded-For decides the client's address (and so its bucket of
 * failures) when, and only when, the connection comes from a listed proxy. Off by default.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import { buildApi } from '../../src/api/app.js';
import { loadConfig } from '../../src/cli/config.js';
import { Core } from '../../src/core/core.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { generateTokenValue } from '../../src/core/tokens.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';

/** The API as `vessel serve` builds it from this environment, with a burst of 2 failures per client. */
async function apiFrom(env: NodeJS.ProcessEnv) {
  const config = loadConfig(env);
  const dir = mkdtempSync(join(tmpdir(), 'vessel-proxies-'));
  const core = new Core({ store: new SqliteStore(join(dir, 'vessel.db')), driver: new FakeDriver(), gateway: new FakeGateway(), secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: ROOMY_TENANT_LIMITS });
  const app = await buildApi({
    core,
    logger: false,
    rateLimit: { ratePerSec: 0, burst: 0 },
    unauthenticatedRateLimit: { ratePerSec: 0.01, burst: 2 },
    trustedProxies: config.trustedProxies,
    maxFileBytes: 1024 * 1024,
    listenHost: '127.0.0.1',
  });
  await app.ready();
  /** A failed request from `peer` (the connection's address) claiming to forward for `forwardedFor`. */
  const fail = async (peer: string, forwardedFor?: string) =>
    (await app.inject({ method: 'GET', url: '/v1/runtimes', remoteAddress: peer, headers: { authorization: `Bearer ${generateTokenValue()}`, ...(forwardedFor === undefined ? {} : { 'x-forwarded-for': forwardedFor }) } })).statusCode;
  return {
    fail,
    async close() {
      await app.close();
      await core.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test('VESSEL_TRUSTED_PROXIES: addresses, CIDRs and named ranges; anything else stops the start', () => {
  assert.deepEqual(loadConfig({}).trustedProxies, [], 'off by default');
  assert.deepEqual(loadConfig({ VESSEL_TRUSTED_PROXIES: ' 10.0.0.0/8, 192.0.2.1 ::1 fd00::/8,loopback ' }).trustedProxies, ['10.0.0.0/8', '192.0.2.1', '::1', 'fd00::/8', 'loopback']);
  for (const bad of ['proxy.example.com', '10.0.0.0/33', '::1/129', '10.0.0.0/8/1', '10.0.0.0/', '*']) {
    assert.throws(() => loadConfig({ VESSEL_TRUSTED_PROXIES: bad }), /VESSEL_TRUSTED_PROXIES/, bad);
  }
});

test('from a trusted proxy, X-Forwarded-For decides the bucket; from any other peer it is ignored', async () => {
  const api = await apiFrom({ VESSEL_TRUSTED_PROXIES: '10.0.0.0/8' });
  try {
    const proxy = '10.1.2.3';
    // Two clients behind the proxy: each has its own allowance of failures.
    assert.deepEqual([await api.fail(proxy, '203.0.113.7'), await api.fail(proxy, '203.0.113.7'), await api.fail(proxy, '203.0.113.7')], [401, 401, 429]);
    assert.equal(await api.fail(proxy, '203.0.113.8'), 401, 'another client behind the same proxy');
    // What a client put in the header itself, in front of what the proxy appended, is not believed.
    assert.equal(await api.fail(proxy, '198.51.100.99, 203.0.113.7'), 429);
    // A chain of trusted proxies: the nearest address that is not one is the client.
    assert.equal(await api.fail(proxy, '203.0.113.7, 10.9.9.9'), 429);
    assert.equal(await api.fail(proxy), 401, 'without the header, the proxy is the client');

    // A peer that is not a trusted proxy cannot pick its bucket with the header.
    const stranger = '198.51.100.9';
    assert.deepEqual([await api.fail(stranger, '203.0.113.50'), await api.fail(stranger, '203.0.113.51'), await api.fail(stranger, '203.0.113.52')], [401, 401, 429]);
    assert.equal(await api.fail(stranger, '203.0.113.8'), 429, "not even another client's bucket");
  } finally {
    await api.close();
  }
});

test('without VESSEL_TRUSTED_PROXIES, X-Forwarded-For is ignored', async () => {
  const api = await apiFrom({});
  try {
    assert.deepEqual([await api.fail('10.1.2.3', '203.0.113.1'), await api.fail('10.1.2.3', '203.0.113.2'), await api.fail('10.1.2.3', '203.0.113.3')], [401, 401, 429]);
  } finally {
    await api.close();
  }
});
