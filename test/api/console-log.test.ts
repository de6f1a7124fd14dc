/**
 * GET /v1/runtimes/{id}/console-log over the fake driver: the bound, the scope, tenancy, hostile
 * bytes, and the states it answers in. The real serial log is read in test/vm/console-log.test.ts.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import type { FakeDriver } from '../support/fake-driver.js';

let h: ApiHarness;
let driver: FakeDriver;
let id: string;

before(async () => {
  h = await apiHarness();
  driver = h.driver as FakeDriver;
  const r = await h.call('POST', '/v1/runtimes', { display_name: 'booted' });
  assert.equal(r.status, 201);
  id = r.body.data.id;
});
after(() => h.close());

const log = (ref: string, query = '', token?: string | null) => h.call('GET', `/v1/runtimes/${ref}/console-log${query}`, undefined, token);

test("a booted runtime's log, by id or name", async () => {
  for (const ref of [id, 'booted']) {
    const r = await log(ref);
    assert.equal(r.status, 200);
    assert.match(r.body.data.output, /^Linux version /);
    assert.equal(r.body.data.truncated, false);
    assert.equal(r.body.data.bytes, Buffer.byteLength(r.body.data.output));
  }
});

test('max_bytes bounds the reply to the end of the log, and says what was left out', async () => {
  driver.consoleLogs.set(id, Buffer.from('a'.repeat(100_000) + 'the end\n'));
  let r = await log(id, '?max_bytes=8');
  assert.deepEqual(r.body.data, { output: 'the end\n', bytes: 8, truncated: true });
  r = await log(id);
  assert.equal(r.body.data.bytes, 64 * 1024);
  assert.equal(r.body.data.truncated, true);
  assert.ok(r.body.data.output.endsWith('the end\n'));
  r = await log(id, '?max_bytes=1048576');
  assert.equal(r.body.data.bytes, 100_008);
  assert.equal(r.body.data.truncated, false);
});

test('bad max_bytes is invalid_argument', async () => {
  for (const q of ['0', '-1', '1048577', 'x', '1.5']) {
    const r = await log(id, `?max_bytes=${q}`);
    assert.equal(r.status, 400, q);
    assert.equal(r.body.error.code, 'invalid_argument');
  }
});

test("a guest's invalid UTF-8 and control bytes come back as text", async () => {
  driver.consoleLogs.set(id, Buffer.concat([Buffer.from('ok \x1b[31m'), Buffer.from([0xff, 0xfe, 0x00]), Buffer.from(' ✓\n')]));
  const r = await log(id);
  assert.equal(r.status, 200);
  assert.equal(r.body.data.output, 'ok \x1b[31m\ufffd\ufffd\x00 ✓\n');
  // Cut inside a character: its stray continuation bytes are dropped, not shown as U+FFFD.
  driver.consoleLogs.set(id, Buffer.from('x✓✓'));
  const cut = await log(id, '?max_bytes=5');
  assert.deepEqual(cut.body.data, { output: '✓', bytes: 5, truncated: true });
});

test('it answers in every state where the log exists: crashed and shut down too', async () => {
  driver.consoleLogs.set(id, Buffer.from('Linux version x\nKernel panic - not syncing\n'));
  driver.crash(id);
  await waitForStatus(id, 'crashed');
  let r = await log(id);
  assert.equal(r.status, 200);
  assert.match(r.body.data.output, /Kernel panic/);
  assert.equal((await h.call('POST', `/v1/runtimes/${id}/start`)).status, 200);
  assert.equal((await h.call('POST', `/v1/runtimes/${id}/stop`)).status, 200);
  r = await log(id);
  assert.equal(r.status, 200);
  assert.match(r.body.data.output, /^Linux version /);
});

test('not_found: a runtime without a log, an unknown one, another tenant\'s', async () => {
  driver.consoleLogs.delete(id);
  let r = await log(id);
  assert.equal(r.status, 404);
  assert.equal(r.body.error.code, 'not_found');
  r = await log('nope');
  assert.equal(r.status, 404);
  const created = await h.call('POST', '/v1/runtimes', { display_name: 'theirs' });
  const other = await h.token('other-tenant', ['runtimes:read']);
  r = await log(created.body.data.id, '', other);
  assert.equal(r.status, 404);
  assert.equal(r.body.error.code, 'not_found');
});

test('scope: runtimes:read reads it; a token without it is permission_denied', async () => {
  const created = await h.call('POST', '/v1/runtimes', { display_name: 'scoped' });
  const reader = await h.token('default', ['runtimes:read']);
  assert.equal((await log(created.body.data.id, '', reader)).status, 200);
  const writer = await h.token('default', ['exec', 'files:read', 'runtimes:write']);
  const r = await log(created.body.data.id, '', writer);
  assert.equal(r.status, 403);
  assert.equal(r.body.error.code, 'permission_denied');
  assert.equal((await log(created.body.data.id, '', null)).status, 401);
});

async function waitForStatus(ref: string, status: string): Promise<void> {
  for (;;) {
    const r = await h.call('GET', `/v1/runtimes/${ref}`);
    if (r.body.data.status === status) return;
    await new Promise((resolve) => setImmediate(resolve));
  }
}
