/**
 * The rest of E2B's control plane (src/e2b/control-plane.ts, docs/e2b.md) over the fake driver:
 * pause and resume, and keep-alive refreshes, driven by E2B's own SDK, unmodified
 * and configured only through its options (its typed API client for the routes its Sandbox class
 * does not call), and read back through Vessel's own API.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { ApiClient, ConnectionConfig, Sandbox, SandboxError } from 'e2b';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

let api: ApiHarness;
let base: string;
/** A token of tenant `acme` with the scopes a user of E2B's SDK needs. */
let key: string;

before(async () => {
  api = await apiHarness();
  await api.app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(api.app.server.address() as AddressInfo).port}`;
  key = await api.token('acme', ['runtimes:read', 'runtimes:write', 'exec', 'files:read', 'files:write']);
});
after(() => api.close());

/** The SDK's connection options, as a user sets them; envd is the API port's own (/e2b-envd). */
const opts = (apiKey = key) => ({ apiUrl: `${base}/e2b`, sandboxUrl: `${base}/e2b-envd`, apiKey });
/** The SDK's typed client of E2B's OpenAPI document, for the routes its Sandbox class does not call. */
const e2bClient = (apiKey = key) => new ApiClient(new ConnectionConfig(opts(apiKey))).api;

const listAll = async (o: Parameters<typeof Sandbox.list>[0]) => {
  const paginator = Sandbox.list(o);
  const items = [];
  while (paginator.hasNext) items.push(...(await paginator.nextItems()));
  return items;
};
const idsOf = (items: Array<{ sandboxId: string }>) => items.map((s) => s.sandboxId);
const statusOf = async (id: string) => (await api.call('GET', `/v1/runtimes/${id}`, undefined, key)).body.data.status as string;

test('pause: the sandbox is a paused runtime, listed by the paused state only; connect resumes it', async () => {
  const sbx = await Sandbox.create({ ...opts(), metadata: { case: 'pause' } });
  try {
    assert.equal(await sbx.pause(), true);
    assert.equal(await statusOf(sbx.sandboxId), 'paused');
    assert.equal((await sbx.getInfo()).state, 'paused');
    const query = (state: Array<'running' | 'paused'>) => ({ ...opts(), query: { metadata: { case: 'pause' }, state } });
    assert.deepEqual(idsOf(await listAll(query(['paused']))), [sbx.sandboxId]);
    assert.deepEqual(idsOf(await listAll(query(['running']))), []);
    // v1 lists running sandboxes only.
    assert.deepEqual((await e2bClient().GET('/sandboxes', { params: { query: { metadata: 'case=pause' } } })).data, []);

    const back = await Sandbox.connect(sbx.sandboxId, opts());
    assert.equal(await statusOf(sbx.sandboxId), 'running');
    assert.equal((await back.getInfo()).state, 'running');
    assert.deepEqual(idsOf(await listAll(query(['running']))), [sbx.sandboxId]);
    // The fake guest answers a command with its command line: the resumed sandbox runs commands.
    assert.equal((await back.commands.run('echo back')).stdout, '/bin/bash -l -c echo back');
  } finally {
    await sbx.kill();
  }
});

test('pausing a paused sandbox is E2B\'s 409, which the SDK reads as false; a pause without memory is refused', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    assert.equal(await Sandbox.betaPause(sbx.sandboxId, opts()), true);
    assert.equal(await sbx.pause(), false);
    const again = await api.call('POST', `/e2b/sandboxes/${sbx.sandboxId}/pause`, {}, key);
    assert.deepEqual(again, { ...again, status: 409, body: { code: 409, message: `sandbox '${sbx.sandboxId}' is already paused` } });
    await Sandbox.connect(sbx.sandboxId, opts());
    // E2B's filesystem-only pause drops the memory; Vessel keeps it or refuses, never downgrades silently.
    await assert.rejects(sbx.pause({ keepMemory: false }), (err: unknown) => err instanceof SandboxError && /^400: .*memory: false/.test(err.message));
    assert.equal(await statusOf(sbx.sandboxId), 'running');
    // A pause with no body at all is a pause with memory.
    assert.equal((await api.call('POST', `/e2b/sandboxes/${sbx.sandboxId}/pause`, undefined, key)).status, 204);
    assert.equal(await statusOf(sbx.sandboxId), 'paused');
  } finally {
    await sbx.kill();
  }
});

test('the legacy resume: a paused sandbox comes back (201, its timeout set as E2B sets it); a running one is a 409', async () => {
  const sbx = await Sandbox.create({ ...opts(), timeoutMs: 600_000 });
  try {
    const running = await e2bClient().POST('/sandboxes/{sandboxID}/resume', { params: { path: { sandboxID: sbx.sandboxId } }, body: {} });
    assert.equal(running.response.status, 409);
    assert.deepEqual(running.error, { code: 409, message: `sandbox '${sbx.sandboxId}' is already running` });

    await sbx.pause();
    const resumed = await e2bClient().POST('/sandboxes/{sandboxID}/resume', { params: { path: { sandboxID: sbx.sandboxId } }, body: { timeout: 120 } });
    assert.equal(resumed.response.status, 201);
    assert.equal(resumed.data?.sandboxID, sbx.sandboxId);
    assert.equal(resumed.data?.envdAccessToken, key);
    assert.equal(await statusOf(sbx.sandboxId), 'running');
    assert.deepEqual((await api.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, key)).body.data.lifecycle, { idle_timeout_secs: 120, on_idle: 'stop', auto_delete_secs: 0 });

    // Without a timeout, E2B's resume gives 15 s; autoPause asked for makes the idle action a suspend.
    await sbx.pause();
    assert.equal((await api.call('POST', `/e2b/sandboxes/${sbx.sandboxId}/resume`, { autoPause: true }, key)).status, 201);
    assert.deepEqual((await api.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, key)).body.data.lifecycle, { idle_timeout_secs: 15, on_idle: 'suspend', auto_delete_secs: null });

    await sbx.pause();
    const cold = await api.call('POST', `/e2b/sandboxes/${sbx.sandboxId}/resume`, { memory: false }, key);
    assert.deepEqual([cold.status, cold.body.code], [400, 400]);
    assert.equal(await statusOf(sbx.sandboxId), 'paused');
    // connect's cold boot (onResume: 'reboot' sends memory: false) is refused the same way.
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { ...opts(), onResume: 'reboot' }), (err: unknown) => err instanceof SandboxError && /^400: /.test(err.message));
  } finally {
    await sbx.kill();
  }
});

test('refreshes keep a running sandbox alive: a longer duration raises its timeout, a shorter never lowers it; a paused one is not found', async () => {
  const sbx = await Sandbox.create({ ...opts(), timeoutMs: 60_000 });
  const refresh = (body: { duration?: number } | undefined, id = sbx.sandboxId) => e2bClient().POST('/sandboxes/{sandboxID}/refreshes', { params: { path: { sandboxID: id } }, ...(body === undefined ? {} : { body }) });
  const idleTimeout = async () => (await api.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, key)).body.data.lifecycle.idle_timeout_secs as number;
  try {
    assert.equal((await refresh(undefined)).response.status, 204);
    assert.equal((await refresh({ duration: 30 })).response.status, 204);
    assert.equal(await idleTimeout(), 60, 'a shorter keep-alive never shortens the timeout');
    assert.equal((await refresh({ duration: 900 })).response.status, 204);
    assert.equal(await idleTimeout(), 900);
    const tooLong = await refresh({ duration: 86_401 });
    assert.deepEqual([tooLong.response.status, tooLong.error?.code], [400, 400]);

    await sbx.pause();
    const paused = await refresh({});
    assert.deepEqual(paused.error, { code: 404, message: `sandbox '${sbx.sandboxId}' not found` });
  } finally {
    await sbx.kill();
  }
});
