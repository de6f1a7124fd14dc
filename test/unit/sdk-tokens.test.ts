/**
 * The SDK's vessel.tokens and rt.consoleLog() against the real API over a real store (the fake
 * driver's console log stands for a VM's; test/vm/console-log.test.ts reads a real one).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { Vessel, VesselError } from '../../client/index.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import type { FakeDriver } from '../support/fake-driver.js';

let h: ApiHarness;
let url: string;
let vessel: Vessel;

before(async () => {
  h = await apiHarness();
  await h.app.listen({ port: 0, host: '127.0.0.1' });
  url = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
  vessel = new Vessel({ url, token: h.admin, retry: { maxRetries: 0 } });
});
after(() => h.close());

const codeOf = (promise: Promise<unknown>) =>
  promise.then(
    () => 'resolved',
    (err: unknown) => (err instanceof VesselError ? err.code : String(err)),
  );

test('tokens: create answers the value once; the new client works; list pages and filters; revoke ends it', async () => {
  const made = await vessel.tokens.create({ tenant: 'sdk-tenant', scopes: ['runtimes:read', 'runtimes:write'], name: 'sdk' });
  assert.match(made.token, /^vsl_/);
  const tenant = new Vessel({ url, token: made.token, retry: { maxRetries: 0 } });
  assert.deepEqual(await tenant.runtimes.list().toArray(), []);
  assert.equal(await codeOf(tenant.tokens.list().toArray()), 'permission_denied');

  for (let i = 0; i < 3; i++) await vessel.tokens.create({ tenant: 'sdk-tenant', scopes: ['exec'] });
  const pages: number[] = [];
  for await (const page of vessel.tokens.list({ tenant: 'sdk-tenant', limit: 3 }).pages()) pages.push(page.data.length);
  assert.deepEqual(pages, [3, 1]);
  const all = await vessel.tokens.list({ tenant: 'sdk-tenant' }).toArray();
  assert.equal(all.at(-1)!.id, made.id);
  assert.ok(all.every((t) => !('token' in t)));

  const got = await vessel.tokens.get(made.id);
  assert.equal(got.revoked_at, null);
  const revoked = await vessel.tokens.revoke(made.id);
  assert.notEqual(revoked.revoked_at, null);
  assert.equal(await codeOf(tenant.runtimes.list().toArray()), 'unauthenticated');
  assert.equal(await codeOf(vessel.tokens.get('nope')), 'not_found');
  assert.equal(await codeOf(vessel.tokens.create({ tenant: 'sdk-tenant', scopes: [] })), 'invalid_argument');
});

test("rt.consoleLog(): the end of the runtime's console, bounded by maxBytes", async () => {
  const rt = await vessel.runtimes.create({ display_name: 'sdk-console' });
  (h.driver as FakeDriver).consoleLogs.set(rt.id, Buffer.from('Linux version 6.1\nready\n'));
  assert.deepEqual(await rt.consoleLog(), { output: 'Linux version 6.1\nready\n', bytes: 24, truncated: false });
  assert.deepEqual(await rt.consoleLog({ maxBytes: 6 }), { output: 'ready\n', bytes: 6, truncated: true });
  assert.equal(await codeOf(rt.consoleLog({ maxBytes: 0 })), 'invalid_argument');
});
