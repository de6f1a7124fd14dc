/**
 * /v1/templates with the fake builder: create from an image (JSON) or an archive (raw body), get,
 * list, delete, the build log as server-sent events, scopes, tenancy and the error envelopes.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import type { VmSpec } from '../../src/core/ports.js';
import type { ProcessSpec } from '../../src/core/types.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { FAKE_DISK_BYTES, FakeTemplateBuilder } from '../support/fake-template-builder.js';
import { sseEvents, type Sse } from '../support/sse.js';

let h: ApiHarness;
let builder: FakeTemplateBuilder;
let api: string;

before(async () => {
  builder = new FakeTemplateBuilder();
  h = await apiHarness({ templateBuilder: builder });
  api = await h.app.listen({ host: '127.0.0.1', port: 0 });
});
after(() => h.close());

const openLog = (ref: string, token = h.admin) => fetch(`${api}/v1/templates/${ref}/build`, { headers: { authorization: `Bearer ${token}`, accept: 'text/event-stream' } });

async function buildLog(ref: string, token = h.admin, opened?: Response): Promise<{ status: number; type: string | null; events: Sse[] }> {
  const res = opened ?? (await openLog(ref, token));
  if (res.status !== 200) return { status: res.status, type: res.headers.get('content-type'), events: [{ event: 'body', data: await res.json(), id: undefined }] };
  const events: Sse[] = [];
  for await (const e of sseEvents(res)) events.push(e);
  return { status: res.status, type: res.headers.get('content-type'), events };
}

const upload = (name: string | null, body: Buffer, token = h.admin) =>
  fetch(`${api}/v1/templates${name === null ? '' : `?name=${name}`}`, { method: 'POST', headers: { authorization: `Bearer ${token}`, 'content-type': 'application/x-tar' }, body: new Uint8Array(body) });

test('create from an image answers 201 building; the build log streams steps and ends done; the template is ready', async () => {
  const release = builder.hold();
  const created = await h.call('POST', '/v1/templates', { name: 'py', image: 'registry.example.com:5000/team/py:3.12' });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const t = created.body.data;
  assert.equal(t.state, 'building');
  assert.equal(t.display_name, 'py');
  assert.deepEqual(t.source, { image: 'registry.example.com:5000/team/py:3.12', registry_secret_id: null });
  assert.equal(t.failure, null);
  assert.equal(t.disk_bytes, null);
  await builder.reached(1);
  const opened = await openLog('py');
  release();
  const { status, type, events } = await buildLog('py', h.admin, opened);
  assert.equal(status, 200);
  assert.match(type ?? '', /^text\/event-stream/);
  assert.deepEqual(events.map((e) => e.event), ['step', 'output', 'step_done', 'step', 'step_done', 'step', 'step_done', 'done']);
  assert.deepEqual(events[0]!.data, { step: 1, name: 'pull registry.example.com:5000/team/py:3.12' });
  assert.deepEqual(events[1]!.data, { step: 1, text: 'copying blobs\n' });
  assert.equal(events[2]!.data.cached, false);
  assert.equal(typeof events[2]!.data.duration_ms, 'number');
  assert.deepEqual(events.at(-1)!.data, { state: 'ready', failure: null });
  const ready = (await h.call('GET', `/v1/templates/${t.id}`)).body.data;
  assert.equal(ready.state, 'ready');
  assert.equal(ready.disk_bytes, FAKE_DISK_BYTES);
  assert.deepEqual(ready.config, { env: { PATH: '/usr/bin:/bin' }, workdir: '/', user: 'app', entrypoint: null, cmd: ['sh'] });
});

test('a failed build shows its step, exit code and output tail, in the record and at the end of its log', async () => {
  assert.equal((await h.call('POST', '/v1/templates', { name: 'broken', image: 'example.com/team/fail-7' })).status, 201);
  await h.core.templates.settled();
  const t = (await h.call('GET', '/v1/templates/broken')).body.data;
  assert.equal(t.state, 'failed');
  assert.deepEqual(t.failure, { step: 'apply the layers', exit_code: 7, output_tail: 'layer 2: refused\nthe layers could not be applied\n' });
  const { events } = await buildLog('broken');
  assert.deepEqual(events.at(-1)!.data, { state: 'failed', failure: t.failure });
  assert.equal(events.at(-2)!.data.exit_code, 7);
});

test('an archive body builds a template named by ?name=', async () => {
  const res = await upload('uploaded', Buffer.from('a docker save archive'));
  const body = (await res.json()) as any;
  assert.equal(res.status, 201, JSON.stringify(body));
  assert.deepEqual(body.data.source, { archive_bytes: 21 });
  await h.core.templates.settled();
  assert.equal((await h.call('GET', '/v1/templates/uploaded')).body.data.state, 'ready');
  const noName = await upload(null, Buffer.from('x'));
  assert.equal(noName.status, 400);
  assert.match(((await noName.json()) as any).error.message, /needs \?name=/);
});

test('a build context with ?dockerfile= builds a Dockerfile: its build args and egress policy go to the build, egress closed unless given', async () => {
  const post = (query: string) =>
    fetch(`${api}/v1/templates?${query}`, { method: 'POST', headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/x-tar' }, body: new Uint8Array(Buffer.from('a tar stream')) });
  const args = encodeURIComponent(JSON.stringify({ V: '3.12' }));
  const res = await post(`name=from-dockerfile&dockerfile=./docker/Dockerfile&build_args=${args}`);
  const body = (await res.json()) as any;
  assert.equal(res.status, 201, JSON.stringify(body));
  assert.deepEqual(body.data.source, { dockerfile: 'docker/Dockerfile', context_bytes: 12, build_args: { V: '3.12' }, egress_policy: { enabled: true, allowed_hosts: [] } });
  const given = builder.sources.find((s) => s.templateId === body.data.id)!.source;
  assert.equal(given.kind, 'dockerfile');
  assert.deepEqual(given.kind === 'dockerfile' ? [given.dockerfile, { ...given.buildArgs }, given.ready] : null, ['docker/Dockerfile', { V: '3.12' }, { command: null, port: null, timeoutSecs: 300 }], 'no ready check unless asked; 5 minutes to start');
  const readyOf = async (query: string) => {
    const r = await post(query);
    const b = (await r.json()) as any;
    assert.equal(r.status, 201, JSON.stringify(b));
    const source = builder.sources.find((s) => s.templateId === b.data.id)!.source;
    return source.kind === 'dockerfile' ? source.ready : null;
  };
  assert.deepEqual(await readyOf('name=on-port&dockerfile=Dockerfile&ready_port=8888&ready_timeout_secs=60'), { command: null, port: 8888, timeoutSecs: 60 });
  assert.deepEqual(await readyOf(`name=on-cmd&dockerfile=Dockerfile&ready_cmd=${encodeURIComponent('curl -sf localhost:8888/api')}`), { command: 'curl -sf localhost:8888/api', port: null, timeoutSecs: 300 });
  const open = await post(`name=open-egress&dockerfile=Dockerfile&egress_policy=${encodeURIComponent(JSON.stringify({ enabled: true, allowed_hosts: ['PyPI.org'] }))}`);
  assert.deepEqual(((await open.json()) as any).data.source.egress_policy, { enabled: true, allowed_hosts: ['pypi.org'] });
  const cases: Array<[string, RegExp]> = [
    ['name=x&build_args=%7B%7D', /go with dockerfile=/],
    ['name=x&dockerfile=../Dockerfile', /not a path inside the build context/],
    ['name=x&dockerfile=Dockerfile&build_args=not-json', /build_args is not valid JSON/],
    ['name=x&dockerfile=Dockerfile&build_args=%7B%22A%22%3A1%7D', /build_args must be an object of strings/],
    ['name=x&dockerfile=Dockerfile&build_args=%7B%22A-B%22%3A%22x%22%7D', /not a variable name/],
    ['name=x&dockerfile=Dockerfile&egress_policy=%7B%22enabled%22%3A%22yes%22%7D', /egress_policy must be an object/],
    ['name=x&ready_port=80', /ready_\* go with dockerfile=/],
    ['name=x&dockerfile=Dockerfile&ready_port=80&ready_cmd=true', /ready_cmd or ready_port, not both/],
    ['name=x&dockerfile=Dockerfile&ready_port=0', /ready_port/],
    ['name=x&dockerfile=Dockerfile&ready_port=65536', /ready_port/],
    ['name=x&dockerfile=Dockerfile&ready_port=http', /ready_port/],
    ['name=x&dockerfile=Dockerfile&ready_cmd=%20', /ready_cmd must be a shell command/],
    ['name=x&dockerfile=Dockerfile&ready_port=80&ready_timeout_secs=3601', /ready_timeout_secs/],
    ['name=x&dockerfile=Dockerfile&ready_port=80&ready_timeout_secs=0', /ready_timeout_secs/],
  ];
  for (const [query, message] of cases) {
    const r = await post(query);
    const b = (await r.json()) as any;
    assert.equal(r.status, 400, query);
    assert.match(b.error.message, message, query);
  }
  assert.equal((await h.call('GET', '/v1/templates/x')).status, 404, 'a refused create makes nothing');
  await h.core.templates.settled();
});

test('bad requests get the error envelope and make nothing', async () => {
  const cases: Array<[unknown, number, RegExp]> = [
    [{ name: 'x' }, 400, /image/],
    [{ name: 'x', image: 'docker://debian:12' }, 400, /image must be an image reference/],
    [{ name: 'x', image: '-debian' }, 400, /image must be an image reference/],
    [{ name: 'bad name', image: 'debian:12' }, 400, /name/],
    [{ name: 'x', image: 'debian:12', extra: 1 }, 400, /./],
    [{ name: 'x', image: 'debian:12', registry_secret: 'missing' }, 404, /secret 'missing' not found/],
  ];
  for (const [body, status, message] of cases) {
    const r = await h.call('POST', '/v1/templates', body);
    assert.equal(r.status, status, JSON.stringify(body));
    assert.match(r.body.error.message, message, JSON.stringify(body));
  }
  assert.equal((await h.call('POST', '/v1/templates', { name: 'py', image: 'debian:12' })).body.error.code, 'already_exists');
  assert.equal((await h.call('GET', '/v1/templates/x')).status, 404);
  assert.equal((await buildLog('x')).status, 404);
  assert.equal((await h.call('DELETE', '/v1/templates/x')).status, 404);
});

test('templates are tenant-scoped and need the templates scopes; lists page newest first', async () => {
  const reader = await h.token('acme', ['templates:read']);
  const writer = await h.token('acme', ['templates:write', 'templates:read']);
  const other = await h.token('other', ['admin']);
  assert.equal((await h.call('POST', '/v1/templates', { name: 'a', image: 'debian:12' }, reader)).status, 403);
  for (const name of ['a', 'b', 'c']) assert.equal((await h.call('POST', '/v1/templates', { name, image: 'debian:12' }, writer)).status, 201);
  await h.core.templates.settled();
  const first = await h.call('GET', '/v1/templates?limit=2', undefined, reader);
  assert.deepEqual(first.body.data.map((t: any) => t.display_name), ['c', 'b']);
  const second = await h.call('GET', `/v1/templates?limit=2&page_token=${first.body.next_page_token}`, undefined, reader);
  assert.deepEqual(second.body.data.map((t: any) => t.display_name), ['a']);
  assert.equal(second.body.next_page_token, undefined);
  const id = first.body.data[0].id;
  assert.equal((await h.call('GET', `/v1/templates/${id}`, undefined, other)).status, 404, "another tenant's template is not found");
  assert.equal((await buildLog(id, other)).status, 404);
  assert.equal((await h.call('DELETE', `/v1/templates/${id}`, undefined, other)).status, 404);
  assert.equal((await h.call('POST', '/v1/templates', { name: 'a', image: 'debian:12' }, other)).status, 201, 'names are per tenant');
  assert.equal((await h.call('DELETE', '/v1/templates/a', undefined, reader)).status, 403);
  assert.deepEqual((await h.call('DELETE', '/v1/templates/a', undefined, writer)).body, { data: {} });
  assert.equal((await h.call('GET', '/v1/templates/a', undefined, reader)).status, 404);
});

test('delete during a build stops it; a reader of its log sees it end failed', async () => {
  builder.hold();
  const started = builder.sources.length;
  assert.equal((await h.call('POST', '/v1/templates', { name: 'slow', image: 'debian:12' })).status, 201);
  await builder.reached(started + 1);
  const opened = await openLog('slow');
  assert.equal(opened.status, 200);
  assert.deepEqual((await h.call('DELETE', '/v1/templates/slow')).body, { data: {} });
  const { events } = await buildLog('slow', h.admin, opened);
  assert.deepEqual(events.at(-1)!.data.state, 'failed');
  assert.equal((await h.call('GET', '/v1/templates/slow')).status, 404);
});

test('a runtime from a ready template boots on it, shows it, and its execs default to its ENV, WORKDIR and USER; building, failed, unknown and other tenants\' templates are refused', async () => {
  const driver = h.driver as unknown as { create(spec: VmSpec): Promise<void>; spawnProcess(runtimeId: string, spec: ProcessSpec): Promise<unknown> };
  const specs: VmSpec[] = [];
  const spawned: ProcessSpec[] = [];
  const create = driver.create.bind(driver);
  const spawn = driver.spawnProcess.bind(driver);
  driver.create = (spec) => (specs.push(spec), create(spec));
  driver.spawnProcess = (id, spec) => (spawned.push(spec), spawn(id, spec));

  builder.hold()(); // an earlier test may have left builds held
  const ready = (await h.call('POST', '/v1/templates', { name: 'rt-base', image: 'debian:12' })).body.data;
  await h.core.templates.settled();
  const made = await h.call('POST', '/v1/runtimes', { display_name: 'from-template', template: 'rt-base' });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  assert.equal(made.body.data.template_id, ready.id);
  assert.equal(specs.at(-1)!.templateId, ready.id);
  assert.equal(specs.at(-1)!.fromCheckpointId, null, 'a cold boot on the template: no system checkpoint of its own yet');
  const plain = await h.call('POST', '/v1/runtimes', { display_name: 'from-default' });
  assert.equal(plain.status, 201);
  assert.equal(plain.body.data.template_id, undefined);

  assert.equal((await h.call('POST', '/v1/runtimes/from-template/exec', { command: 'env' })).status, 200);
  assert.deepEqual([spawned.at(-1)!.env, spawned.at(-1)!.cwd, spawned.at(-1)!.user], [{ PATH: '/usr/bin:/bin' }, '/', 'app']);
  assert.equal((await h.call('POST', '/v1/runtimes/from-template/exec', { command: 'env', env: { PATH: '/mine', X: '1' }, cwd: '/', user: 'root' })).status, 200);
  assert.deepEqual([spawned.at(-1)!.env, spawned.at(-1)!.user], [{ PATH: '/mine', X: '1' }, 'root'], "the request's env and user win");
  assert.equal((await h.call('POST', '/v1/runtimes/from-template/processes', { command: 'sleep 1', user: '1000:50' })).status, 201);
  assert.equal(spawned.at(-1)!.user, '1000:50');
  assert.equal((await h.call('POST', '/v1/runtimes/from-default/exec', { command: 'env' })).status, 200);
  assert.deepEqual([spawned.at(-1)!.env, spawned.at(-1)!.cwd, spawned.at(-1)!.user], [{}, null, null], 'a runtime of the built-in image gets no defaults');
  for (const user of ['', 'a b', 'x:y:z', 'me\n', ':g', 'x'.repeat(257)]) {
    const bad = await h.call('POST', '/v1/runtimes/from-default/exec', { command: 'true', user });
    assert.equal(bad.status, 400, `user ${JSON.stringify(user)}`);
    assert.equal(bad.body.error.code, 'invalid_argument');
  }

  const release = builder.hold();
  await h.call('POST', '/v1/templates', { name: 'rt-building', image: 'debian:12' });
  await h.call('POST', '/v1/templates', { name: 'rt-failed', image: 'example.com/fail-3' });
  const refusals: Array<[unknown, number, string, RegExp]> = [
    [{ display_name: 'r1', template: 'rt-building' }, 409, 'failed_precondition', /still building/],
    [{ display_name: 'r2', template: 'nope' }, 404, 'not_found', /nope/],
    [{ display_name: 'r3', template: 'rt-base', checkpoint: 'x' }, 400, 'invalid_argument', /not both/],
  ];
  for (const [body, status, code, message] of refusals) {
    const res = await h.call('POST', '/v1/runtimes', body);
    assert.deepEqual([res.status, res.body.error?.code], [status, code], JSON.stringify(res.body));
    assert.match(res.body.error.message, message);
  }
  release();
  await h.core.templates.settled();
  const failed = await h.call('POST', '/v1/runtimes', { display_name: 'r4', template: 'rt-failed' });
  assert.deepEqual([failed.status, failed.body.error?.code], [409, 'failed_precondition']);
  assert.match(failed.body.error.message, /failed to build/);
  const other = await h.token('someone-else', ['admin']);
  const theirs = await h.call('POST', '/v1/runtimes', { display_name: 'r5', template: ready.id }, other);
  assert.deepEqual([theirs.status, theirs.body.error?.code], [404, 'not_found'], "another tenant's template is not found");
  for (const name of ['from-template', 'from-default']) assert.equal((await h.call('DELETE', `/v1/runtimes/${name}`)).status, 200);
});
