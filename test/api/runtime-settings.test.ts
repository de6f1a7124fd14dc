/**
 * Labels, lifecycle settings, list filters and ingress URLs of runtimes, over the real API and
 * store with the fake driver. The lifecycle timers are driven by calling a sweep at a chosen
 * time, so nothing here waits on the clock.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

async function withHarness(work: (h: ApiHarness) => Promise<void>, opts: Parameters<typeof apiHarness>[0] = {}): Promise<void> {
  const h = await apiHarness(opts);
  try {
    await work(h);
  } finally {
    await h.close();
  }
}

const create = (h: ApiHarness, body: object) => h.call('POST', '/v1/runtimes', body);

function refused(r: { status: number; body: any }, message: RegExp): void {
  assert.equal(r.status, 400, JSON.stringify(r.body));
  assert.equal(r.body.error.code, 'invalid_argument');
  assert.match(r.body.error.message, message);
}

test('a runtime shows labels {}, the default lifecycle and no ingress URLs unless given', async () => {
  await withHarness(async (h) => {
    const r = await create(h, { display_name: 'plain', ingress_specs: [{ protocol: 'http', runtime_port: 8000 }] });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.deepEqual(r.body.data.labels, {});
    assert.deepEqual(r.body.data.lifecycle, { idle_timeout_secs: null, on_idle: 'suspend', auto_delete_secs: null });
    assert.deepEqual(r.body.data.ingress_urls, [], 'this service runs no ingress');
  });
});

test('labels and lifecycle are set at create, shown, and bounded', async () => {
  await withHarness(async (h) => {
    const labels = { team: 'data', 'app.kubernetes.io/name': 'notebook', empty: '' };
    const lifecycle = { idle_timeout_secs: 300, on_idle: 'stop', auto_delete_secs: 0 };
    const r = await create(h, { display_name: 'tagged', labels, lifecycle });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.deepEqual(r.body.data.labels, labels);
    assert.deepEqual(r.body.data.lifecycle, lifecycle);

    const many = Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v']));
    refused(await create(h, { display_name: 'many', labels: many }), /labels/);
    for (const key of ['', '-lead', 'trail-', 'sp ace', 'a=b', 'x'.repeat(64), 'ünï']) {
      refused(await create(h, { display_name: 'badkey', labels: { [key]: 'v' } }), /label/);
    }
    refused(await create(h, { display_name: 'long', labels: { k: 'v'.repeat(256) } }), /255|value/);
    refused(await create(h, { display_name: 'ctl', labels: { k: 'a\nb' } }), /control character/);
    refused(await create(h, { display_name: 'num', labels: { k: 1 } }), /labels/);
    refused(await create(h, { display_name: 'neg', lifecycle: { idle_timeout_secs: -1 } }), /idle_timeout_secs/);
    refused(await create(h, { display_name: 'huge', lifecycle: { auto_delete_secs: 365 * 24 * 3600 + 1 } }), /auto_delete_secs/);
    refused(await create(h, { display_name: 'frac', lifecycle: { auto_delete_secs: 1.5 } }), /auto_delete_secs/);
    refused(await create(h, { display_name: 'how', lifecycle: { on_idle: 'pause' } }), /on_idle/);
    refused(await create(h, { display_name: 'extra', lifecycle: { idle_secs: 3 } }), /idle_secs|additional/);
    assert.equal((await h.call('GET', '/v1/runtimes')).body.data.length, 1, 'no refused create left a runtime');
  });
});

test('PATCH replaces the labels whole and changes only the lifecycle fields it gives', async () => {
  await withHarness(async (h) => {
    await create(h, { display_name: 'p', labels: { a: '1', b: '2' }, lifecycle: { idle_timeout_secs: 60, on_idle: 'stop', auto_delete_secs: 600 } });
    let r = await h.call('PATCH', '/v1/runtimes/p', { labels: { c: '3' } });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    assert.deepEqual(r.body.data.labels, { c: '3' });
    assert.deepEqual(r.body.data.lifecycle, { idle_timeout_secs: 60, on_idle: 'stop', auto_delete_secs: 600 }, 'untouched without lifecycle');
    r = await h.call('PATCH', '/v1/runtimes/p', { lifecycle: { idle_timeout_secs: null } });
    assert.deepEqual(r.body.data.lifecycle, { idle_timeout_secs: null, on_idle: 'stop', auto_delete_secs: 600 });
    assert.deepEqual(r.body.data.labels, { c: '3' }, 'untouched without labels');
    r = await h.call('PATCH', '/v1/runtimes/p', { labels: {}, lifecycle: { auto_delete_secs: null, on_idle: 'suspend' } });
    assert.deepEqual(r.body.data.labels, {});
    assert.deepEqual(r.body.data.lifecycle, { idle_timeout_secs: null, on_idle: 'suspend', auto_delete_secs: null });
    refused(await h.call('PATCH', '/v1/runtimes/p', { labels: { 'bad key': 'v' } }), /label key/);
    assert.deepEqual((await h.call('GET', '/v1/runtimes/p')).body.data.labels, {}, 'a refused PATCH changed nothing');
  });
});

test('labels, lifecycle and the stop time survive a restart of the service', async () => {
  const first = await apiHarness();
  const dir = first.dir;
  try {
    await create(first, { display_name: 'kept', labels: { env: 'prod' }, lifecycle: { idle_timeout_secs: 45, on_idle: 'stop', auto_delete_secs: 120 } });
    assert.equal((await first.call('POST', '/v1/runtimes/kept/stop')).status, 200);
    const stoppedAt = Date.now();
    await first.app.close();
    await first.core.close();

    const h = await apiHarness({ dir, driver: first.driver });
    try {
      const r = await h.call('GET', '/v1/runtimes/kept');
      assert.deepEqual(r.body.data.labels, { env: 'prod' });
      assert.deepEqual(r.body.data.lifecycle, { idle_timeout_secs: 45, on_idle: 'stop', auto_delete_secs: 120 });
      assert.equal((await h.call('GET', '/v1/runtimes?label=env=prod')).body.data.length, 1);
      // The restarted service counts from when the runtime stopped, not from its own start.
      await h.core.runtimes.runLifecycleTimers(stoppedAt + 100_000);
      assert.equal((await h.call('GET', '/v1/runtimes/kept')).status, 200, 'not due before 120 s');
      await h.core.runtimes.runLifecycleTimers(Date.now() + 121_000);
      assert.equal((await h.call('GET', '/v1/runtimes/kept')).status, 404, 'deleted once due');
    } finally {
      await h.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('label and status filters select in the store: every page is full, and paging goes through all matches', async () => {
  await withHarness(async (h) => {
    const names: string[] = [];
    for (let i = 0; i < 9; i++) {
      const name = `f${i}`;
      names.push(name);
      const labels: Record<string, string> = { team: i % 3 === 0 ? 'a' : 'b', ...(i % 2 === 0 ? { gpu: '' } : {}) };
      assert.equal((await create(h, { display_name: name, labels })).status, 201);
    }
    for (const name of ['f0', 'f3', 'f4']) assert.equal((await h.call('POST', `/v1/runtimes/${name}/stop`)).status, 200);

    const all = async (query: string): Promise<string[]> => {
      const seen: string[] = [];
      let token: string | undefined;
      do {
        const r = await h.call('GET', `/v1/runtimes?limit=2&${query}${token === undefined ? '' : `&page_token=${token}`}`);
        assert.equal(r.status, 200, JSON.stringify(r.body));
        token = r.body.next_page_token;
        if (token !== undefined) assert.equal(r.body.data.length, 2, `a page before the last is full (${query})`);
        seen.push(...r.body.data.map((rt: any) => rt.display_name));
      } while (token !== undefined);
      return seen;
    };
    const newestFirst = (keep: (i: number) => boolean) => names.filter((_, i) => keep(i)).reverse();

    assert.deepEqual(await all('label=team=b'), newestFirst((i) => i % 3 !== 0));
    assert.deepEqual(await all('label=gpu'), newestFirst((i) => i % 2 === 0), 'key present, whatever its value');
    assert.deepEqual(await all('label=gpu='), newestFirst((i) => i % 2 === 0), 'key with the empty value');
    assert.deepEqual(await all('label=team=b&label=gpu'), newestFirst((i) => i % 3 !== 0 && i % 2 === 0), 'selectors are ANDed');
    assert.deepEqual(await all('label=team=c'), []);
    assert.deepEqual(await all('status=shutdown'), ['f4', 'f3', 'f0']);
    assert.deepEqual(await all('status=shutdown,paused'), ['f4', 'f3', 'f0'], 'a comma list');
    assert.deepEqual(await all('status=shutdown&status=running'), newestFirst(() => true), 'repeated');
    assert.deepEqual(await all('status=running&label=team=a'), ['f6']);

    refused(await h.call('GET', '/v1/runtimes?status=sleeping'), /status 'sleeping'/);
    refused(await h.call('GET', '/v1/runtimes?status=running,'), /status ''/);
    refused(await h.call('GET', '/v1/runtimes?label=bad%20key'), /label selector key/);
    refused(await h.call('GET', '/v1/runtimes?label==v'), /label selector key/);
    refused(await h.call('GET', `/v1/runtimes?${Array.from({ length: 17 }, (_, i) => `label=k${i}`).join('&')}`), /label/);
  });
});

test('filters keep to the tenant: another tenant with the same labels is never listed', async () => {
  await withHarness(async (h) => {
    const acme = await h.token('acme', ['admin']);
    const bob = await h.token('bob', ['admin']);
    assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'x', labels: { shared: 'yes' } }, acme)).status, 201);
    assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'x', labels: { shared: 'yes' } }, bob)).status, 201);
    const listed = (await h.call('GET', '/v1/runtimes?label=shared=yes', undefined, bob)).body.data;
    assert.equal(listed.length, 1);
  });
});

test('ingress_urls follow the configured domain and port, one per spec in order', async () => {
  await withHarness(
    async (h) => {
      const specs = [
        { protocol: 'https', runtime_port: 8443 },
        { protocol: 'http', runtime_port: 8000 },
      ];
      const r = await create(h, { display_name: 'web', ingress_specs: specs });
      const id = r.body.data.id;
      assert.deepEqual(r.body.data.ingress_urls, [
        { runtime_port: 8443, protocol: 'https', url: `https://8443-${id}.sandbox.example/` },
        { runtime_port: 8000, protocol: 'http', url: `http://8000-${id}.sandbox.example:443/` },
      ]);
      assert.deepEqual((await h.call('GET', '/v1/runtimes')).body.data[0].ingress_urls, r.body.data.ingress_urls, 'lists show them too');
    },
    { ingress: { domain: 'Sandbox.Example', port: 443 } },
  );
});

test('idle timers: a runtime idle past its timeout is stopped or suspended as set, never while work is in flight', async () => {
  await withHarness(async (h) => {
    const stop = (await create(h, { display_name: 'to-stop', lifecycle: { idle_timeout_secs: 60, on_idle: 'stop' } })).body.data.id;
    await create(h, { display_name: 'to-suspend', lifecycle: { idle_timeout_secs: 60 } });
    await create(h, { display_name: 'default', lifecycle: {} });
    await create(h, { display_name: 'never', lifecycle: { idle_timeout_secs: 0 } });
    const t0 = Date.now();
    const runtimes = h.core.runtimes;
    await runtimes.runLifecycleTimers(t0);
    const release = runtimes.hold(stop);
    await runtimes.runLifecycleTimers(t0 + 59_000);
    assert.equal((await h.call('GET', '/v1/runtimes?status=running')).body.data.length, 4, 'nothing is due before 60 s');
    await runtimes.runLifecycleTimers(Date.now() + 61_000);
    const status = async (name: string) => (await h.call('GET', `/v1/runtimes/${name}`)).body.data;
    assert.equal((await status('to-stop')).status, 'running', 'a command in flight keeps it from idling');
    const suspended = await status('to-suspend');
    assert.equal(suspended.status, 'suspended');
    assert.match(suspended.status_message, /suspended after 60 s without activity/);
    assert.equal((await status('default')).status, 'running', 'the service default here is never');
    assert.equal((await status('never')).status, 'running');
    release();
    await runtimes.runLifecycleTimers(Date.now() + 61_000);
    const stopped = await status('to-stop');
    assert.equal(stopped.status, 'shutdown');
    assert.match(stopped.status_message, /stopped after 60 s without activity/);
    const audited = (await h.call('GET', '/v1/audits?category=lifecycle')).body.data.map((a: any) => [a.payload.lifecycle.runtime_name, a.payload.lifecycle.action]);
    assert.deepEqual(audited, [['to-stop', 'stop'], ['to-suspend', 'suspend']], 'each action is audited, newest first');
    // Started again, it runs until idle again, and its message is gone.
    const started = await h.call('POST', `/v1/runtimes/${stop}/start`);
    assert.equal(started.body.data.status, 'running');
    assert.equal(started.body.data.status_message, undefined);
  });
});

test('auto-delete: a runtime is deleted that long after it stopped running, not while it runs, and a late PATCH starts the clock anew', async () => {
  await withHarness(async (h) => {
    const runtimes = h.core.runtimes;
    await create(h, { display_name: 'brief', lifecycle: { auto_delete_secs: 30 } });
    await create(h, { display_name: 'later', lifecycle: { auto_delete_secs: 30 } });
    const patched = (await create(h, { display_name: 'patched' })).body.data.id;
    await runtimes.runLifecycleTimers(Date.now() + 3_600_000);
    assert.equal((await h.call('GET', '/v1/runtimes')).body.data.length, 3, 'running runtimes are never auto-deleted');
    for (const name of ['brief', 'patched']) await h.call('POST', `/v1/runtimes/${name}/stop`);
    await runtimes.runLifecycleTimers(Date.now() + 29_000);
    assert.equal((await h.call('GET', '/v1/runtimes/brief')).status, 200, 'not before its time');
    await runtimes.runLifecycleTimers(Date.now() + 31_000);
    assert.equal((await h.call('GET', '/v1/runtimes/brief')).status, 404, 'deleted 30 s after it stopped');
    const audits = (await h.call('GET', '/v1/audits?category=lifecycle')).body.data;
    assert.equal(audits.length, 1);
    assert.equal(audits[0].category, 'lifecycle');
    assert.deepEqual(audits[0].payload, { lifecycle: { action: 'delete', reason: 'deleted 30 s after it stopped running (lifecycle.auto_delete_secs)', runtime_name: 'brief' } });
    assert.equal((await h.call('GET', '/v1/runtimes/later')).status, 200, 'still running');

    // Stopped an hour ago, as the store has it: setting auto_delete now counts from now.
    const record = (await h.store.runtimes.findById(patched))!;
    await h.store.runtimes.update({ ...record, stoppedAt: new Date(Date.now() - 3_600_000).toISOString() });
    const patchedAt = Date.now();
    assert.equal((await h.call('PATCH', '/v1/runtimes/patched', { lifecycle: { auto_delete_secs: 600 } })).status, 200);
    await runtimes.runLifecycleTimers(patchedAt + 599_000);
    assert.equal((await h.call('GET', '/v1/runtimes/patched')).status, 200);
    await runtimes.runLifecycleTimers(Date.now() + 601_000);
    assert.equal((await h.call('GET', '/v1/runtimes/patched')).status, 404);
  });
});
