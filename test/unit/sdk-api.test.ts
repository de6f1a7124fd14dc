/**
 * The SDK against the real API over a real store (the fake driver runs no VM): every object and
 * method a test can reach without a guest, paging, typed errors, raw bodies of every kind, and a
 * real rate limit. What needs a guest is in test/vm/sdk.test.ts.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { Vessel, VesselError, type Runtime } from '../../client/index.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

let h: ApiHarness;
let vessel: Vessel;
let rt: Runtime;
let url: string;

async function listening(harness: ApiHarness): Promise<string> {
  await harness.app.listen({ port: 0, host: '127.0.0.1' });
  return `http://127.0.0.1:${(harness.app.server.address() as AddressInfo).port}`;
}

before(async () => {
  h = await apiHarness();
  url = await listening(h);
  vessel = new Vessel({ url, token: h.admin });
  rt = await vessel.runtimes.create({ display_name: 'sdk-main' });
});
after(() => h.close());

describe('runtimes', () => {
  test('create answers a running runtime; get finds it by name or id', async () => {
    assert.equal(rt.status, 'running');
    assert.equal(rt.name, 'sdk-main');
    assert.equal((await vessel.runtimes.get('sdk-main')).id, rt.id);
    assert.equal((await vessel.runtimes.get(rt.id)).name, 'sdk-main');
  });

  test('list follows next_page_token across pages, newest first', async () => {
    for (const name of ['page-a', 'page-b', 'page-c', 'page-d']) await vessel.runtimes.create({ display_name: name });
    const pages: string[][] = [];
    for await (const page of vessel.runtimes.list({ limit: 2 }).pages()) pages.push(page.data.map((r) => r.name));
    assert.deepEqual(pages, [['page-d', 'page-c'], ['page-b', 'page-a'], ['sdk-main']]);
    const names: string[] = [];
    for await (const r of vessel.runtimes.list({ limit: 3 })) names.push(r.name);
    assert.deepEqual(names, ['page-d', 'page-c', 'page-b', 'page-a', 'sdk-main']);
    for (const r of await vessel.runtimes.list().toArray()) if (r.name.startsWith('page-')) await r.delete();
  });

  test('list filters by labels and status; create and patch take labels and lifecycle', async () => {
    const tagged = await vessel.runtimes.create({ display_name: 'sdk-tagged', labels: { team: 'data', gpu: 'yes' }, lifecycle: { auto_delete_secs: 3600 } });
    assert.deepEqual(tagged.labels, { gpu: 'yes', team: 'data' });
    assert.deepEqual(tagged.info.lifecycle, { idle_timeout_secs: null, on_idle: 'suspend', auto_delete_secs: 3600 });
    assert.deepEqual(tagged.ingressUrls, []);
    const other = await vessel.runtimes.create({ display_name: 'sdk-other', labels: { team: 'ops' } });
    await other.stop();
    const names = async (options: Parameters<typeof vessel.runtimes.list>[0]) => (await vessel.runtimes.list(options).toArray()).map((r) => r.name);
    assert.deepEqual(await names({ labels: { team: 'data' } }), ['sdk-tagged']);
    assert.deepEqual(await names({ labels: { team: true } }), ['sdk-other', 'sdk-tagged']);
    assert.deepEqual(await names({ labels: { team: true, gpu: 'yes' } }), ['sdk-tagged']);
    assert.deepEqual(await names({ status: 'shutdown' }), ['sdk-other']);
    assert.deepEqual(await names({ status: ['shutdown', 'paused'], labels: { team: 'ops' }, limit: 1 }), ['sdk-other']);
    await assert.rejects(vessel.runtimes.list({ labels: { 'bad key': 'x' } }).toArray(), (e: VesselError) => e.code === 'invalid_argument');
    await tagged.patch({ labels: {}, lifecycle: { on_idle: 'stop' } });
    assert.deepEqual(tagged.labels, {});
    assert.deepEqual(tagged.info.lifecycle, { idle_timeout_secs: null, on_idle: 'stop', auto_delete_secs: 3600 });
    await tagged.delete();
    await other.delete();
  });

  test('lifecycle and patch update the handle', async () => {
    const other = await vessel.runtimes.create({ display_name: 'sdk-life' });
    assert.equal((await other.pause()).status, 'paused');
    assert.equal((await other.resume()).status, 'running');
    assert.equal((await other.stop()).status, 'shutdown');
    assert.equal((await other.start()).status, 'running');
    await other.patch({ egress_policy: { enabled: true, allowed_hosts: ['example.com'] } });
    assert.deepEqual(other.info.egress_policy.allowed_hosts, ['example.com']);
    await other.delete();
    await assert.rejects(other.refresh(), (e: VesselError) => e.code === 'not_found');
  });

  test('a lifecycle call from the wrong state is failed_precondition, not retried', async () => {
    await assert.rejects(rt.resume(), (e: VesselError) => e instanceof VesselError && e.code === 'failed_precondition' && e.status === 409);
  });
});

describe('errors', () => {
  test('not_found carries its status, message and the request id', async () => {
    const err = await vessel.runtimes.get('no-such').catch((e: unknown) => e);
    assert.ok(err instanceof VesselError);
    assert.equal(err.code, 'not_found');
    assert.equal(err.status, 404);
    assert.match(err.message, /no-such/);
    assert.match(err.requestId ?? '', /^[\w.-]+$/);
  });

  test('already_exists, unauthenticated and permission_denied', async () => {
    await assert.rejects(vessel.runtimes.create({ display_name: 'sdk-main' }), (e: VesselError) => e.code === 'already_exists');
    const stranger = new Vessel({ url, token: 'vsl_nope' });
    await assert.rejects(stranger.runtimes.get('sdk-main'), (e: VesselError) => e.code === 'unauthenticated' && e.status === 401);
    const reader = new Vessel({ url, token: await h.token('default', ['runtimes:read']) });
    await assert.rejects(reader.secrets.list().toArray(), (e: VesselError) => e.code === 'permission_denied');
  });

  test('invalid_argument for a body the schema refuses', async () => {
    await assert.rejects(rt.exec({ command: 'x', max_output_bytes: 5 * 1024 * 1024 }), (e: VesselError) => e.code === 'invalid_argument' && e.status === 400);
  });
});

describe('exec', () => {
  test('buffered exec answers the result', async () => {
    const result = await rt.exec('echo hi');
    assert.equal(result.exit_code, 0);
    assert.equal(result.stdout, 'echo hi', 'the fake driver echoes the command');
  });

  test('a streamed exec the service cannot start throws before any stream', async () => {
    await assert.rejects(rt.execStream({ command: 'true', cwd: '/no/such/dir' }), (e: VesselError) => e.code === 'command_failed');
  });
});

describe('files', () => {
  const sources: Array<[string, () => unknown]> = [
    ['a string', () => 'hello'],
    ['bytes', () => new TextEncoder().encode('hello')],
    ['an ArrayBuffer', () => new TextEncoder().encode('hello').buffer],
    ['a Blob', () => new Blob(['hel', 'lo'])],
    ['a web stream', () => new Blob(['hel', 'lo']).stream()],
    ['a Node stream', () => Readable.from([Buffer.from('hel'), Buffer.from('lo')])],
    ['an async generator', () => (async function* () { yield 'hel'; yield new TextEncoder().encode('lo'); })()],
  ];
  for (const [what, source] of sources) {
    test(`write takes ${what}`, async () => {
      const written = await rt.files.write('/tmp/f.txt', source() as Parameters<typeof rt.files.write>[1]);
      assert.deepEqual(written, { path: '/tmp/f.txt', size_bytes: 5 });
      assert.equal(await rt.files.readText('/tmp/f.txt'), 'hello');
    });
  }

  test('read as a stream, as bytes; an empty file', async () => {
    await rt.files.write('/tmp/bin', new Uint8Array([0, 255, 1]));
    const chunks: Uint8Array[] = [];
    for await (const c of await rt.files.read('/tmp/bin')) chunks.push(c);
    assert.deepEqual([...Buffer.concat(chunks)], [0, 255, 1]);
    assert.deepEqual([...(await rt.files.readBytes('/tmp/bin'))], [0, 255, 1]);
    await rt.files.write('/tmp/empty', '');
    assert.equal((await rt.files.readBytes('/tmp/empty')).length, 0);
  });

  test('list, stat, mkdir and remove', async () => {
    await rt.files.mkdir('/data/sub');
    await rt.files.write('/data/x.txt', 'x');
    assert.deepEqual((await rt.files.list('/data')).map((f) => [f.name, f.type]), [['sub', 'directory'], ['x.txt', 'file']]);
    assert.equal((await rt.files.stat('/data/x.txt', { follow_symlinks: false })).size_bytes, 1);
    await assert.rejects(rt.files.remove('/data'), (e: VesselError) => e.code === 'failed_precondition');
    await rt.files.remove('/data', { recursive: true });
    await assert.rejects(rt.files.stat('/data/x.txt'), (e: VesselError) => e.code === 'not_found');
  });

  test('archives reach the service (the fake driver makes none)', async () => {
    await assert.rejects(rt.files.uploadArchive('/x', new Uint8Array(1024)), (e: VesselError) => e.code === 'unimplemented' && e.status === 501);
    await assert.rejects(rt.files.downloadArchive('/x'), (e: VesselError) => e.code === 'unimplemented');
  });
});

describe('checkpoints and forks', () => {
  test('checkpoint, then fork once it is ready; list and delete', async () => {
    const cp = await rt.checkpoint({ name: 'sdk-cp' });
    assert.equal(cp.state, 'creating');
    const fork = await vessel.runtimes.fork(cp, { display_name: 'sdk-fork' });
    assert.equal(fork.status, 'running');
    assert.ok((await vessel.checkpoints.list().toArray()).some((c) => c.id === cp.id && c.state === 'ready'));
    assert.ok((await vessel.checkpoints.list({ include_system: true }).toArray()).some((c) => c.system));
    await fork.delete();
    await vessel.checkpoints.delete('sdk-cp');
    await assert.rejects(vessel.checkpoints.get(cp.id), (e: VesselError) => e.code === 'not_found');
  });

  test('a checkpoint with no body', async () => {
    const cp = await rt.checkpoint();
    assert.equal((await vessel.checkpoints.waitUntilReady(cp.display_name)).state, 'ready');
    await vessel.checkpoints.delete(cp.id);
  });
});

describe('secrets, rules and audits', () => {
  test('a secret and a rule that uses it; lists and deletes', async () => {
    const secret = await vessel.secrets.create({ name: 'sdk-secret', value: 'hunter2' });
    assert.equal(JSON.stringify(secret).includes('hunter2'), false);
    assert.equal((await vessel.secrets.get('sdk-secret')).id, secret.id);
    const rule = await rt.rules.create({ host: '*.example.com', secret: 'sdk-secret', injection: { headerName: 'x-api-key' } });
    assert.equal((await rt.rules.get(rule.id)).host_pattern, '*.example.com');
    assert.deepEqual((await rt.rules.list().toArray()).map((r) => r.id), [rule.id]);
    assert.deepEqual((await vessel.rules.list({ limit: 1 }).toArray()).map((r) => r.id), [rule.id]);
    await assert.rejects(vessel.secrets.delete(secret.id), (e: VesselError) => e.code === 'failed_precondition');
    await vessel.rules.delete(rule.id);
    await vessel.secrets.delete(secret.id);
    assert.deepEqual(await vessel.secrets.list().toArray(), []);
  });

  test('audits list with filters', async () => {
    assert.deepEqual(await vessel.audits.list({ runtime: rt.id, category: 'egress', limit: 5 }).toArray(), []);
  });
});

test('a real rate limit: rate_limited with Retry-After once retries are off', async () => {
  const limited = await apiHarness({ rate: { ratePerSec: 0.01, burst: 1 } });
  try {
    const client = new Vessel({ url: await listening(limited), token: limited.admin, retry: { maxRetries: 0 } });
    await client.secrets.list().toArray();
    const err = await client.secrets.list().toArray().catch((e: unknown) => e);
    assert.ok(err instanceof VesselError);
    assert.equal(err.code, 'rate_limited');
    assert.ok((err.retryAfterSecs ?? 0) >= 1, String(err.retryAfterSecs));
  } finally {
    await limited.close();
  }
});
