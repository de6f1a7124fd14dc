/**
 * The rest of E2B's control plane (src/e2b/control-plane.ts, docs/e2b.md) over the fake driver:
 * pause and resume, keep-alive refreshes, metrics and logs, driven by E2B's own SDK, unmodified
 * and configured only through its options (its typed API client for the routes its Sandbox class
 * does not call), and read back through Vessel's own API.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import { ApiClient, ConnectionConfig, Sandbox, SandboxError, SandboxNotFoundError } from 'e2b';
import type { FakeDriver } from '../support/fake-driver.js';
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

test('pause: the sandbox is a suspended runtime (saved to disk, kept past its timeout), listed by the paused state only; connect resumes it', async () => {
  const sbx = await Sandbox.create({ ...opts(), metadata: { case: 'pause' } });
  try {
    assert.equal(await sbx.pause(), true);
    assert.equal(await statusOf(sbx.sandboxId), 'suspended');
    assert.equal((await sbx.getInfo()).state, 'paused');
    // A paused sandbox does not time out, as E2B's do not: a lifecycle sweep a day on leaves it.
    await api.core.runtimes.runLifecycleTimers(Date.now() + 86_400_000);
    assert.equal(await statusOf(sbx.sandboxId), 'suspended');
    const query = (state: Array<'running' | 'paused'>) => ({ ...opts(), query: { metadata: { case: 'pause' }, state } });
    assert.deepEqual(idsOf(await listAll(query(['paused']))), [sbx.sandboxId]);
    assert.deepEqual(idsOf(await listAll(query(['running']))), []);
    // v1 lists running sandboxes only.
    assert.deepEqual((await e2bClient().GET('/sandboxes', { params: { query: { metadata: 'case=pause' } } })).data, []);

    const lifecycle = async () => (await api.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, key)).body.data.lifecycle;
    assert.equal((await lifecycle()).auto_delete_secs, null, 'no delete while paused');
    const back = await Sandbox.connect(sbx.sandboxId, opts());
    assert.equal(await statusOf(sbx.sandboxId), 'running');
    assert.equal((await lifecycle()).auto_delete_secs, 0, 'killed at its timeout again once resumed');
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
    // Two pauses at once: whichever comes second finds the sandbox paused.
    assert.deepEqual((await Promise.all([sbx.pause(), sbx.pause()])).sort(), [false, true]);
    await Sandbox.connect(sbx.sandboxId, opts());
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
    assert.equal(await statusOf(sbx.sandboxId), 'suspended');
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
    assert.equal(await statusOf(sbx.sandboxId), 'suspended');
    // connect's cold boot (onResume: 'reboot' sends memory: false) is refused the same way.
    await assert.rejects(Sandbox.connect(sbx.sandboxId, { ...opts(), onResume: 'reboot' }), (err: unknown) => err instanceof SandboxError && /^400: /.test(err.message));
  } finally {
    await sbx.kill();
  }
});

test('refreshes keep a running sandbox alive: its idle clock restarts, a longer duration raises its timeout, a shorter never lowers it; a paused one is not found', async () => {
  const sbx = await Sandbox.create({ ...opts(), timeoutMs: 60_000 });
  const refresh = (body: { duration?: number } | undefined, id = sbx.sandboxId) => e2bClient().POST('/sandboxes/{sandboxID}/refreshes', { params: { path: { sandboxID: id } }, ...(body === undefined ? {} : { body }) });
  const idleTimeout = async () => (await api.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, key)).body.data.lifecycle.idle_timeout_secs as number;
  try {
    // The idle clock: the first sweep that sees the sandbox takes its time as the last activity, an
    // hour ago here; a refresh now is activity, so a sweep half a minute on leaves the sandbox running.
    const t0 = Date.now();
    await api.core.runtimes.runLifecycleTimers(t0 - 3_600_000);
    assert.equal((await refresh(undefined)).response.status, 204);
    await api.core.runtimes.runLifecycleTimers(t0 + 30_000);
    assert.equal(await statusOf(sbx.sandboxId), 'running');
    // Without activity since, its 60 s timeout stops it (what the refresh above kept from happening).
    const other = await Sandbox.create({ ...opts(), timeoutMs: 60_000 });
    await api.core.runtimes.runLifecycleTimers(t0 - 3_600_000);
    await api.core.runtimes.runLifecycleTimers(t0 + 30_000);
    assert.equal(await statusOf(other.sandboxId), 'shutdown');
    await other.kill();

    assert.equal((await refresh({ duration: 30 })).response.status, 204);
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

test('metrics are what Vessel knows of the VM (its vCPUs and RAM), while it runs; no usage is made up', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    const [metric, ...more] = await sbx.getMetrics();
    assert.deepEqual(more, []);
    const rt = (await api.call('GET', `/v1/runtimes/${sbx.sandboxId}`, undefined, key)).body.data;
    assert.equal(metric!.cpuCount, rt.resources.vcpus);
    assert.equal(metric!.memTotal, rt.resources.limits.memory_mib * 1024 * 1024);
    assert.ok(metric!.timestamp instanceof Date && !Number.isNaN(metric!.timestamp.getTime()));
    // Vessel samples no usage: those fields are absent, not zeros.
    for (const field of ['cpuUsedPct', 'memUsed', 'memCache', 'diskUsed', 'diskTotal'] as const) assert.equal(metric![field], undefined, field);

    // The one metric is of now: a window that ends in the past, or starts in the future, holds none.
    assert.deepEqual(await sbx.getMetrics({ end: new Date(0) }), []);
    assert.deepEqual(await sbx.getMetrics({ start: new Date(Date.now() + 3600_000) }), []);

    const batch = await e2bClient().GET('/sandboxes/metrics', { params: { query: { sandbox_ids: [sbx.sandboxId, 'no-such-sandbox'] } } });
    assert.deepEqual(Object.keys(batch.data?.sandboxes ?? {}), [sbx.sandboxId]);
    assert.equal(batch.data?.sandboxes[sbx.sandboxId]?.cpuCount, rt.resources.vcpus);

    // A paused sandbox has no VM running to measure.
    await sbx.pause();
    assert.deepEqual(await sbx.getMetrics(), []);
    assert.deepEqual((await e2bClient().GET('/sandboxes/metrics', { params: { query: { sandbox_ids: [sbx.sandboxId] } } })).data, { sandboxes: {} });
  } finally {
    await sbx.kill();
  }
});

test('logs are the runtime\'s console, a line an entry, bounded and filtered as E2B\'s query asks', async () => {
  const sbx = await Sandbox.create(opts());
  const driver = api.driver as unknown as FakeDriver;
  const logsV2 = async (query: { cursor?: number; direction?: 'forward' | 'backward'; level?: 'debug' | 'info' | 'warn' | 'error'; limit?: number; search?: string } = {}) => {
    const res = await e2bClient().GET('/v2/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: sbx.sandboxId }, query } });
    assert.equal(res.response.status, 200);
    return res.data!.logs;
  };
  try {
    const boot = await logsV2();
    assert.deepEqual(boot.map((e) => e.message), ['Linux version 6.1.0-fake', `vessel-init: ${sbx.sandboxId} up`]);
    assert.deepEqual(boot.map((e) => [e.level, e.fields]), [['info', {}], ['info', {}]]);
    assert.ok(boot.every((e) => e.timestamp === boot[0]!.timestamp && !Number.isNaN(Date.parse(e.timestamp))));

    driver.consoleLogs.set(sbx.sandboxId, Buffer.from('one\r\ntwo\nthree\nfour two\n'));
    assert.deepEqual((await logsV2({ limit: 2 })).map((e) => e.message), ['one', 'two']);
    assert.deepEqual((await logsV2({ direction: 'backward', limit: 2 })).map((e) => e.message), ['four two', 'three']);
    assert.deepEqual((await logsV2({ search: 'two' })).map((e) => e.message), ['two', 'four two']);
    // Every console line is info: asking for warnings and worse finds none.
    assert.deepEqual(await logsV2({ level: 'warn' }), []);
    assert.equal((await logsV2({ level: 'debug' })).length, 4);
    // Entries are stamped when read: a cursor in the future has none after it, and all before it.
    const future = Date.now() + 3600_000;
    assert.deepEqual(await logsV2({ cursor: future }), []);
    assert.equal((await logsV2({ cursor: future, direction: 'backward' })).length, 4);

    const v1 = await e2bClient().GET('/sandboxes/{sandboxID}/logs', { params: { path: { sandboxID: sbx.sandboxId }, query: { limit: 3 } } });
    assert.deepEqual(v1.data?.logs.map((l) => l.line), ['one', 'two', 'three']);
    assert.deepEqual(v1.data?.logEntries.map((e) => e.message), ['one', 'two', 'three']);

    // A log longer than what is read: its cut first line is left out.
    driver.consoleLogs.set(sbx.sandboxId, Buffer.concat([Buffer.from('x'.repeat(70 * 1024)), Buffer.from('\nlast\n')]));
    assert.deepEqual((await logsV2()).map((e) => e.message), ['last']);
    // A runtime whose console is gone has no logs; the sandbox is still found.
    driver.consoleLogs.delete(sbx.sandboxId);
    assert.deepEqual(await logsV2(), []);

    const overLimit = await api.call('GET', `/e2b/v2/sandboxes/${sbx.sandboxId}/logs?limit=1001`, undefined, key);
    assert.deepEqual([overLimit.status, overLimit.body.code], [400, 400]);
  } finally {
    await sbx.kill();
  }
});

test('another tenant\'s sandbox is not found by pause, resume, refreshes, metrics or logs', async () => {
  const sbx = await Sandbox.create(opts());
  try {
    const other = await api.token('globex', ['runtimes:read', 'runtimes:write']);
    await assert.rejects(Sandbox.pause(sbx.sandboxId, opts(other)), SandboxNotFoundError);
    await assert.rejects(Sandbox.getMetrics(sbx.sandboxId, opts(other)), SandboxNotFoundError);
    const notFound = { code: 404, message: `sandbox '${sbx.sandboxId}' not found` };
    for (const [method, path] of [['POST', 'resume'], ['POST', 'refreshes'], ['GET', 'logs']] as const) {
      const res = await api.call(method, `/e2b/sandboxes/${sbx.sandboxId}/${path}`, method === 'POST' ? {} : undefined, other);
      assert.deepEqual([res.status, res.body], [404, notFound], path);
    }
    assert.deepEqual((await api.call('GET', `/e2b/v2/sandboxes/${sbx.sandboxId}/logs`, undefined, other)).body, notFound);
    assert.deepEqual((await e2bClient(other).GET('/sandboxes/metrics', { params: { query: { sandbox_ids: [sbx.sandboxId] } } })).data, { sandboxes: {} });
    assert.equal(await statusOf(sbx.sandboxId), 'running');
  } finally {
    await sbx.kill();
  }
});

test('scopes: a read-only key reads metrics and logs but cannot pause, resume or refresh', async () => {
  const reader = await api.token('acme', ['runtimes:read']);
  const sbx = await Sandbox.create(opts());
  try {
    const lacksWrite = (err: unknown) => err instanceof SandboxError && /^403: .*lacks the 'runtimes:write' scope/.test(err.message);
    await assert.rejects(Sandbox.pause(sbx.sandboxId, opts(reader)), lacksWrite);
    assert.equal(await statusOf(sbx.sandboxId), 'running');
    for (const path of ['resume', 'refreshes']) {
      const res = await api.call('POST', `/e2b/sandboxes/${sbx.sandboxId}/${path}`, {}, reader);
      assert.deepEqual([res.status, res.body.code], [403, 403], path);
    }
    assert.equal((await Sandbox.getMetrics(sbx.sandboxId, opts(reader))).length, 1);
    assert.equal((await api.call('GET', `/e2b/v2/sandboxes/${sbx.sandboxId}/logs`, undefined, reader)).status, 200);
  } finally {
    await sbx.kill();
  }
});

test('unknown sandbox ids get E2B\'s 404 on every new route; malformed queries a 400', async () => {
  await assert.rejects(Sandbox.pause('no-such-sandbox', opts()), SandboxNotFoundError);
  await assert.rejects(Sandbox.getMetrics('no-such-sandbox', opts()), SandboxNotFoundError);
  const notFound = { code: 404, message: "sandbox 'no-such-sandbox' not found" };
  for (const [method, path] of [['POST', 'pause'], ['POST', 'resume'], ['POST', 'refreshes'], ['GET', 'metrics'], ['GET', 'logs']] as const) {
    const res = await api.call(method, `/e2b/sandboxes/no-such-sandbox/${path}`, method === 'POST' ? {} : undefined, key);
    assert.deepEqual([res.status, res.body], [404, notFound], path);
  }
  assert.deepEqual((await api.call('GET', '/e2b/v2/sandboxes/no-such-sandbox/logs', undefined, key)).body, notFound);
  const badQuery = await api.call('GET', '/e2b/sandboxes/no-such-sandbox/metrics?start=yesterday', undefined, key);
  assert.deepEqual([badQuery.status, badQuery.body.code], [400, 400]);
  const tooMany = await api.call('GET', `/e2b/sandboxes/metrics?sandbox_ids=${Array.from({ length: 101 }, (_, i) => `s${i}`).join(',')}`, undefined, key);
  assert.deepEqual([tooMany.status, tooMany.body.code], [400, 400]);
});
