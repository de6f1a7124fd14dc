/** Two tenants and scoped tokens: another tenant's objects are not_found, missing scopes are permission_denied. */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

let h: ApiHarness;
let alice: string;
let bob: string;
let readOnly: string;
before(async () => {
  h = await apiHarness();
  alice = await h.token('alice', ['admin']);
  bob = await h.token('bob', ['admin']);
  readOnly = await h.token('alice', ['runtimes:read', 'secrets:read']);
});
after(() => h.close());

test("another tenant's objects answer not_found, by id and by name", async () => {
  const rt = (await h.call('POST', '/v1/runtimes', { display_name: 'shared-name' }, alice)).body.data;
  const sec = (await h.call('POST', '/v1/secrets', { name: 'alice-key', value: 'a' }, alice)).body.data;
  const rule = (await h.call('POST', '/v1/runtimes/shared-name/secret-injection-rules', { host: 'a.com', injection: { headerName: 'X' }, secret: 'alice-key' }, alice)).body.data;
  const cp = (await h.call('POST', '/v1/runtimes/shared-name/checkpoints', {}, alice)).body.data;
  await h.core.checkpoints.settled();
  for (const path of [`/v1/runtimes/${rt.id}`, '/v1/runtimes/shared-name', `/v1/secrets/${sec.id}`, '/v1/secrets/alice-key', `/v1/runtimes/${rt.id}/secret-injection-rules/${rule.id}`, `/v1/checkpoints/${cp.id}`]) {
    const r = await h.call('GET', path, undefined, bob);
    assert.equal(r.status, 404, path);
    assert.equal(r.body.error.code, 'not_found');
  }
  assert.equal((await h.call('DELETE', `/v1/secret-injection-rules/${rule.id}`, undefined, bob)).status, 404);
  assert.equal((await h.call('DELETE', `/v1/runtimes/${rt.id}`, undefined, bob)).status, 404);
  assert.equal((await h.call('POST', `/v1/runtimes/${rt.id}/exec`, { command: 'x' }, bob)).status, 404);
  assert.deepEqual((await h.call('GET', '/v1/runtimes', undefined, bob)).body.data, []);
  assert.deepEqual((await h.call('GET', '/v1/secret-injection-rules', undefined, bob)).body.data, []);
  // Names are per tenant: bob may use the same one.
  assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'shared-name' }, bob)).status, 201);
  // A rule cannot reference another tenant's secret.
  assert.equal((await h.call('POST', '/v1/runtimes/shared-name/secret-injection-rules', { host: 'a.com', injection: { headerName: 'X' }, secret: sec.id }, bob)).status, 404);
});

test('a missing scope is permission_denied; reads still work', async () => {
  assert.equal((await h.call('GET', '/v1/runtimes', undefined, readOnly)).status, 200);
  for (const [method, path, body] of [
    ['POST', '/v1/runtimes', { display_name: 'nope' }],
    ['POST', '/v1/secrets', { name: 'n', value: 'v' }],
    ['POST', '/v1/runtimes/shared-name/exec', { command: 'x' }],
    ['GET', '/v1/audits', undefined],
    ['GET', '/v1/checkpoints', undefined],
    ['GET', '/v1/runtimes/shared-name/files?path=/x', undefined],
  ] as const) {
    const r = await h.call(method, path, body, readOnly);
    assert.equal(r.status, 403, `${method} ${path}`);
    assert.equal(r.body.error.code, 'permission_denied');
  }
});

test('a revoked token is rejected', async () => {
  const { token, record } = await h.core.tokens.create('carol', ['runtimes:read']);
  assert.equal((await h.call('GET', '/v1/runtimes', undefined, token)).status, 200);
  await h.core.tokens.revoke(record.id);
  assert.equal((await h.call('GET', '/v1/runtimes', undefined, token)).status, 401);
});
