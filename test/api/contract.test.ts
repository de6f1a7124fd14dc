/** Contract tests of every operation of the spec and its error kinds, over a real store. */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';

let h: ApiHarness;
before(async () => {
  h = await apiHarness();
});
after(() => h.close());

const isError = (body: any, code: string) => {
  assert.equal(typeof body.error?.message, 'string', JSON.stringify(body));
  assert.equal(body.error.code, code, JSON.stringify(body));
};


/** The operations of ../shared/spec/runtime-api.md. */
const SPEC_OPERATIONS = [
  'GET /healthz',
  'HEAD /healthz',
  'GET /v1/runtimes',
  'POST /v1/runtimes',
  'GET /v1/runtimes/{runtime_id}',
  'PATCH /v1/runtimes/{runtime_id}',
  'DELETE /v1/runtimes/{runtime_id}',
  'POST /v1/runtimes/{runtime_id}/start',
  'POST /v1/runtimes/{runtime_id}/stop',
  'POST /v1/runtimes/{runtime_id}/pause',
  'POST /v1/runtimes/{runtime_id}/resume',
  'POST /v1/runtimes/{runtime_id}/exec',
  'GET /v1/runtimes/{runtime_id}/files',
  'PUT /v1/runtimes/{runtime_id}/files',
  'POST /v1/runtimes/{runtime_id}/checkpoints',
  'GET /v1/checkpoints',
  'GET /v1/checkpoints/{checkpoint_id}',
  'DELETE /v1/checkpoints/{checkpoint_id}',
  'POST /v1/secrets',
  'GET /v1/secrets',
  'GET /v1/secrets/{secret_id}',
  'DELETE /v1/secrets/{secret_id}',
  'POST /v1/runtimes/{runtime_id}/secret-injection-rules',
  'GET /v1/runtimes/{runtime_id}/secret-injection-rules',
  'GET /v1/runtimes/{runtime_id}/secret-injection-rules/{rule_id}',
  'DELETE /v1/runtimes/{runtime_id}/secret-injection-rules/{rule_id}',
  'GET /v1/secret-injection-rules',
  'DELETE /v1/secret-injection-rules/{rule_id}',
  'GET /v1/audits',
];

/** Beyond the spec: directories, console logs, tokens and templates (docs/api.md), background processes and terminals (docs/processes.md). */
const EXTENSION_OPERATIONS = [
  'POST /v1/runtimes/{runtime_id}/suspend',
  'GET /v1/runtimes/{runtime_id}/files/list',
  'GET /v1/runtimes/{runtime_id}/files/stat',
  'POST /v1/runtimes/{runtime_id}/files/mkdir',
  'DELETE /v1/runtimes/{runtime_id}/files',
  'GET /v1/runtimes/{runtime_id}/files/archive',
  'PUT /v1/runtimes/{runtime_id}/files/archive',
  'POST /v1/runtimes/{runtime_id}/processes',
  'GET /v1/runtimes/{runtime_id}/processes',
  'GET /v1/runtimes/{runtime_id}/processes/{process_id}',
  'DELETE /v1/runtimes/{runtime_id}/processes/{process_id}',
  'GET /v1/runtimes/{runtime_id}/processes/{process_id}/output',
  'POST /v1/runtimes/{runtime_id}/processes/{process_id}/signal',
  'POST /v1/runtimes/{runtime_id}/processes/{process_id}/stdin',
  'GET /v1/runtimes/{runtime_id}/terminal',
  'GET /v1/runtimes/{runtime_id}/console-log',
  'POST /v1/tokens',
  'GET /v1/tokens',
  'GET /v1/tokens/{token_id}',
  'DELETE /v1/tokens/{token_id}',
  'POST /v1/templates',
  'GET /v1/templates',
  'GET /v1/templates/{template_id}',
  'DELETE /v1/templates/{template_id}',
  'GET /v1/templates/{template_id}/build',
];

describe('health, openapi, metrics', () => {
  test('GET /healthz needs no token', async () => {
    const r = await h.call('GET', '/healthz', undefined, null);
    assert.equal(r.status, 200);
    assert.deepEqual(r.body, { data: { status: 'ok' } });
  });
  test('HEAD /healthz has no body', async () => {
    const r = await h.app.inject({ method: 'HEAD', url: '/healthz' });
    assert.equal(r.statusCode, 200);
    assert.equal(r.body, '');
  });
  test('openapi document is 3.0.3 with bearer auth, every operation, and every error documented', async () => {
    const r = await h.call('GET', '/openapi.json', undefined, null);
    assert.equal(r.status, 200);
    assert.equal(r.body.openapi, '3.0.3');
    assert.equal(r.body.info.version, '0.0.4');
    assert.deepEqual(r.body.components.securitySchemes.bearer, { type: 'http', scheme: 'bearer' });
    const ops: string[] = [];
    for (const [path, item] of Object.entries<any>(r.body.paths)) {
      for (const [method, op] of Object.entries<any>(item)) {
        ops.push(`${method.toUpperCase()} ${path}`);
        if (path.startsWith('/v1')) {
          for (const status of ['400', '401', '403', '404', '409', '429', '500', '503', '504']) {
            assert.ok(op.responses[status], `${method} ${path} documents ${status}`);
          }
        }
      }
    }
    assert.deepEqual(ops.sort(), [...SPEC_OPERATIONS, ...EXTENSION_OPERATIONS].sort());
    assert.ok(r.body.components.schemas.Runtime);
    assert.ok(r.body.components.schemas.Process);
  });
  test('metrics are exposed in Prometheus text format', async () => {
    const r = await h.app.inject({ method: 'GET', url: '/metrics' });
    assert.equal(r.statusCode, 200);
    assert.match(r.body, /vessel_http_requests_total/);
    await h.app.inject({ method: 'GET', url: '/healthz' });
    const after = (await h.app.inject({ method: 'GET', url: '/metrics' })).body;
    assert.match(after, /^vessel_http_requests_total\{method="GET",route="\/healthz",status="200"\} [1-9]\d*$/m);
    const count = Number(/^vessel_http_request_duration_seconds_count\{method="GET",route="\/healthz"\} (\d+)$/m.exec(after)?.[1]);
    const inf = Number(/^vessel_http_request_duration_seconds_bucket\{le="\+Inf",method="GET",route="\/healthz"\} (\d+)$/m.exec(after)?.[1]);
    assert.ok(count >= 1 && inf === count, after);
    assert.match(after, /^vessel_process_cpu_seconds_total /m);
  });
});

describe('errors of the HTTP layer', () => {
  test('unknown route is 404 not_found', async () => {
    const r = await h.call('GET', '/v1/nope');
    assert.equal(r.status, 404);
    isError(r.body, 'not_found');
  });
  test('an over-long path segment is an error envelope', async () => {
    const r = await h.call('GET', `/v1/runtimes/${'x'.repeat(300)}`);
    assert.ok(r.status === 404 || r.status === 414, String(r.status));
    assert.equal(typeof r.body.error.code, 'string', JSON.stringify(r.body));
  });
  test('wrong method is 405 with Allow', async () => {
    const r = await h.call('PUT', '/v1/secrets');
    assert.equal(r.status, 405);
    isError(r.body, 'invalid_argument');
    assert.match(String(r.headers.allow), /GET/);
  });
  test('malformed JSON is 400 and does not echo the body', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/secrets',
      headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' },
      payload: '{"name":"x","value":"hunter2-secret',
    });
    assert.equal(res.statusCode, 400);
    isError(JSON.parse(res.body), 'invalid_argument');
    assert.ok(!res.body.includes('hunter2'));
  });
  test('non-JSON body is 415', async () => {
    const res = await h.app.inject({ method: 'POST', url: '/v1/secrets', headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'text/plain' }, payload: 'x' });
    assert.equal(res.statusCode, 415);
    isError(JSON.parse(res.body), 'invalid_argument');
  });
  test('oversized body is 413', async () => {
    const res = await h.app.inject({
      method: 'POST',
      url: '/v1/secrets',
      headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' },
      payload: JSON.stringify({ name: 'big', value: 'x'.repeat(2 * 1024 * 1024) }),
    });
    assert.equal(res.statusCode, 413);
    isError(JSON.parse(res.body), 'invalid_argument');
  });
  test('missing, malformed and unknown tokens are 401', async () => {
    for (const headers of [{}, { authorization: 'Basic abc' }, { authorization: 'Bearer nope' }]) {
      const res = await h.app.inject({ method: 'GET', url: '/v1/secrets', headers });
      assert.equal(res.statusCode, 401);
      isError(JSON.parse(res.body), 'unauthenticated');
    }
  });
  test('rate limit answers 429 with Retry-After', async () => {
    const limited = await apiHarness({ rate: { ratePerSec: 1, burst: 2 } });
    try {
      const statuses = [];
      for (let i = 0; i < 4; i++) statuses.push(await limited.call('GET', '/v1/secrets'));
      assert.deepEqual(statuses.map((s) => s.status), [200, 200, 429, 429]);
      isError(statuses[2]!.body, 'rate_limited');
      assert.ok(Number(statuses[2]!.headers['retry-after']) >= 1);
    } finally {
      await limited.close();
    }
  });
  test('internal errors hide details', async () => {
    const driver = new FakeDriver();
    driver.spawnProcess = async () => {
      throw new Error('boom at /secret/path');
    };
    const broken = await apiHarness({ driver });
    try {
      await broken.call('POST', '/v1/runtimes', { display_name: 'x1' });
      const r = await broken.call('POST', '/v1/runtimes/x1/exec', { command: 'true' });
      assert.equal(r.status, 500);
      assert.deepEqual(r.body, { error: { code: 'internal', message: 'internal error' } });
    } finally {
      await broken.close();
    }
  });
});

describe('runtimes', () => {
  test('create with defaults, get by id and name, list', async () => {
    const r = await h.call('POST', '/v1/runtimes', { display_name: 'rt-a' });
    assert.equal(r.status, 201);
    const rt = r.body.data;
    assert.equal(rt.status, 'running');
    assert.deepEqual(rt.resources, { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 });
    assert.deepEqual(rt.egress_policy, { enabled: true, allowed_hosts: [] });
    assert.deepEqual(rt.ingress_specs, []);
    assert.equal((await h.call('GET', `/v1/runtimes/${rt.id}`)).body.data.display_name, 'rt-a');
    assert.equal((await h.call('GET', '/v1/runtimes/rt-a')).body.data.id, rt.id);
    const list = await h.call('GET', '/v1/runtimes');
    assert.ok(list.body.data.some((x: any) => x.id === rt.id));
  });
  test('duplicate name is 409 already_exists', async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'dup' });
    const r = await h.call('POST', '/v1/runtimes', { display_name: 'dup' });
    assert.equal(r.status, 409);
    isError(r.body, 'already_exists');
  });
  test('validation of every limit', async () => {
    const bad = [
      { display_name: 'bad name' },
      { display_name: '123e4567-e89b-42d3-a456-426614174000' },
      { display_name: 'v', resources: { vcpus: 0 } },
      { display_name: 'v', resources: { vcpus: 2147483648 } },
      { display_name: 'v', resources: { limits: { memory_mib: 0 } } },
      { display_name: 'v', resources: { limits: { memory_mib: 256 }, requests: { memory_mib: 512 } } },
      { display_name: 'v', egress_policy: { enabled: true, allowed_hosts: Array.from({ length: 129 }, (_, i) => `h${i}.com`) } },
      { display_name: 'v', egress_policy: { enabled: true } },
      { display_name: 'v', egress_policy: { enabled: true, allowed_hosts: ['bad host'] } },
      { display_name: 'v', ingress_specs: [{ protocol: 'ftp', runtime_port: 80 }] },
      { display_name: 'v', ingress_specs: [{ protocol: 'http', runtime_port: 65536 }] },
      { display_name: 'v', extra: 1 },
      { display_name: 'v', resources: { vcpus: '2' } },
    ];
    for (const body of bad) {
      const r = await h.call('POST', '/v1/runtimes', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      isError(r.body, 'invalid_argument');
    }
  });
  test('egress policy patterns are normalized', async () => {
    const r = await h.call('POST', '/v1/runtimes', {
      display_name: 'eg',
      egress_policy: { enabled: true, allowed_hosts: ['API.Example.COM.', '*.bücher.de', '*'] },
    });
    assert.deepEqual(r.body.data.egress_policy.allowed_hosts, ['api.example.com', '*.xn--bcher-kva.de', '*']);
  });
  test('lifecycle follows the state machine', async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'life' });
    const step = async (op: string, status: number, expect?: string) => {
      const r = await h.call('POST', `/v1/runtimes/life/${op}`);
      assert.equal(r.status, status, `${op}: ${JSON.stringify(r.body)}`);
      if (expect) assert.equal(r.body.data.status, expect);
      else isError(r.body, 'failed_precondition');
    };
    await step('resume', 409);
    await step('start', 409);
    await step('pause', 200, 'paused');
    await step('pause', 409);
    await step('resume', 200, 'running');
    await step('stop', 200, 'shutdown');
    await step('stop', 409);
    await step('pause', 409);
    await step('start', 200, 'running');
    // suspend (beyond the spec): from running alone, back by resume or start.
    await step('suspend', 200, 'suspended');
    await step('suspend', 409);
    await step('pause', 409);
    await step('resume', 200, 'running');
    await step('pause', 200, 'paused');
    await step('suspend', 409);
    await step('resume', 200, 'running');
    await step('suspend', 200, 'suspended');
    await step('start', 200, 'running');
    const ex = await h.call('POST', '/v1/runtimes/life/stop');
    assert.equal(ex.body.data.status, 'shutdown');
    const e = await h.call('POST', '/v1/runtimes/life/exec', { command: 'true' });
    assert.equal(e.status, 409);
    isError(e.body, 'failed_precondition');
    const d = await h.call('DELETE', '/v1/runtimes/life');
    assert.deepEqual(d.body, { data: {} });
    assert.equal((await h.call('GET', '/v1/runtimes/life')).status, 404);
  });
  test('patch egress and resources', async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'pat', resources: { limits: { memory_mib: 1024 }, requests: { memory_mib: 512 } } });
    let r = await h.call('PATCH', '/v1/runtimes/pat', { egress_policy: { enabled: false, allowed_hosts: ['a.com'] } });
    assert.equal(r.status, 200);
    assert.deepEqual(r.body.data.egress_policy, { enabled: false, allowed_hosts: ['a.com'] });
    r = await h.call('PATCH', '/v1/runtimes/pat', { resources: { requests: { memory_mib: 256 } } });
    assert.equal(r.body.data.resources.requests.memory_mib, 256);
    r = await h.call('PATCH', '/v1/runtimes/pat', { resources: { limits: { memory_mib: 2048 } } });
    // The limit is RAM size: in force at the next start, shown as pending until then.
    assert.equal(r.body.data.resources.limits.memory_mib, 1024);
    assert.equal(r.body.data.pending_resources.limits.memory_mib, 2048);
    r = await h.call('PATCH', '/v1/runtimes/pat', { resources: { limits: { memory_mib: 100 } } });
    assert.equal(r.status, 400);
    r = await h.call('PATCH', '/v1/runtimes/pat', { resources: { requests: { memory_mib: 0 } } });
    assert.equal(r.status, 400);
    await h.call('POST', '/v1/runtimes/pat/stop');
    r = await h.call('POST', '/v1/runtimes/pat/start');
    assert.equal(r.body.data.resources.limits.memory_mib, 2048);
    assert.equal(r.body.data.pending_resources, undefined);
  });
  test('exec validation', async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'ex' });
    const ok = await h.call('POST', '/v1/runtimes/ex/exec', { command: 'echo', args: ['hi'], cwd: null, env: { A: 'b' }, stdin: null, max_output_bytes: null, timeout_secs: null });
    assert.equal(ok.status, 200);
    for (const k of ['exit_code', 'duration_ms', 'stdout', 'stdout_truncated', 'stderr', 'stderr_truncated']) assert.ok(k in ok.body.data, k);
    const bad = [{}, { command: '' }, { command: 'x', max_output_bytes: 4194305 }, { command: 'x', timeout_secs: -1 }, { command: 'x', env: { a: 1 } }, { command: 'x', args: 'a' }];
    for (const body of bad) {
      const r = await h.call('POST', '/v1/runtimes/ex/exec', body);
      assert.equal(r.status, 400, JSON.stringify(body));
    }
    assert.equal((await h.call('POST', '/v1/runtimes/ex/exec', { command: 'x', max_output_bytes: 4194304 })).status, 200);
    assert.equal((await h.call('POST', '/v1/runtimes/missing/exec', { command: 'x' })).status, 404);
  });
  test('files: write, read, relative path', async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'fs' });
    const put = await h.app.inject({ method: 'PUT', url: '/v1/runtimes/fs/files?path=/tmp/a.bin', headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/octet-stream' }, payload: Buffer.from([0, 1, 2, 255]) });
    assert.equal(put.statusCode, 200, put.body);
    assert.deepEqual(JSON.parse(put.body), { data: { path: '/tmp/a.bin', size_bytes: 4 } });
    const get = await h.app.inject({ method: 'GET', url: '/v1/runtimes/fs/files?path=/tmp/a.bin', headers: { authorization: `Bearer ${h.admin}` } });
    assert.equal(get.statusCode, 200);
    assert.equal(get.headers['content-type'], 'application/octet-stream');
    assert.deepEqual(get.rawPayload, Buffer.from([0, 1, 2, 255]));
    const rel = await h.call('GET', '/v1/runtimes/fs/files?path=tmp/a');
    assert.equal(rel.status, 400);
    assert.equal((await h.call('GET', '/v1/runtimes/fs/files')).status, 400);
  });
  test('capacity refusal is unavailable and leaves no record', async () => {
    const driver = new FakeDriver();
    driver.capacityMib = 600;
    const small = await apiHarness({ driver });
    try {
      assert.equal((await small.call('POST', '/v1/runtimes', { display_name: 'one' })).status, 201);
      const r = await small.call('POST', '/v1/runtimes', { display_name: 'two' });
      assert.equal(r.status, 503);
      isError(r.body, 'unavailable');
      assert.equal((await small.call('GET', '/v1/runtimes/two')).status, 404);
    } finally {
      await small.close();
    }
  });
});

describe('secrets and rules', () => {
  test('secret CRUD never returns the value', async () => {
    const r = await h.call('POST', '/v1/secrets', { name: 'api-key', value: 'sk-very-secret', cache_ttl_secs: 30 });
    assert.equal(r.status, 201);
    assert.deepEqual(Object.keys(r.body.data).sort(), ['cache_ttl_secs', 'created_at', 'display_name', 'id']);
    assert.ok(!JSON.stringify(r.body).includes('sk-very-secret'));
    const byName = await h.call('GET', '/v1/secrets/api-key');
    assert.equal(byName.body.data.id, r.body.data.id);
    assert.equal((await h.call('GET', '/v1/secrets')).body.data[0].display_name, 'api-key');
    const dflt = await h.call('POST', '/v1/secrets', { name: 'k2', value: 'v' });
    assert.equal(dflt.body.data.cache_ttl_secs, 0);
    for (const body of [{ name: 'k3', value: '' }, { name: 'k3', value: 'a\nb' }, { name: 'k3', value: 'x'.repeat(65537) }, { name: 'k3' }, { name: 'k3', value: 'v', cache_ttl_secs: -1 }, { name: 'k3', value: 'v', cache_ttl_secs: 4294967296 }]) {
      const bad = await h.call('POST', '/v1/secrets', body);
      assert.equal(bad.status, 400, JSON.stringify(body).slice(0, 80));
    }
    const k2 = dflt.body.data.id;
    assert.equal((await h.call('GET', `/v1/secrets/${k2}`)).status, 200);
    assert.equal((await h.call('DELETE', '/v1/secrets/k2')).status, 200);
    // Read by id and by name before the delete: neither may outlive it.
    assert.equal((await h.call('GET', '/v1/secrets/k2')).status, 404);
    assert.equal((await h.call('GET', `/v1/secrets/${k2}`)).status, 404);
    const again = await h.call('POST', '/v1/secrets', { name: 'k2', value: 'v2' });
    assert.equal((await h.call('GET', '/v1/secrets/k2')).body.data.id, again.body.data.id);
  });
  test('rules: create, get, list, delete both ways; secret in use', async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'rr' });
    await h.call('POST', '/v1/secrets', { name: 'tok', value: 's3cr3t-value' });
    const r = await h.call('POST', '/v1/runtimes/rr/secret-injection-rules', {
      host: 'API.github.com',
      injection: { headerName: 'Authorization', valueFormat: 'Bearer ${credential}', extra: { any: 1 } },
      secret: 'tok',
    });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    const rule = r.body.data;
    assert.equal(rule.credential_display_name, 'tok');
    assert.equal(rule.runtime_display_name, 'rr');
    assert.equal(rule.host_pattern, 'api.github.com');
    assert.equal(rule.path_pattern, '/**');
    assert.deepEqual(JSON.parse(rule.injection_config_json), { headerName: 'Authorization', valueFormat: 'Bearer ${credential}', extra: { any: 1 } });
    assert.equal((await h.call('GET', `/v1/runtimes/rr/secret-injection-rules/${rule.id}`)).body.data.id, rule.id);
    assert.equal((await h.call('GET', '/v1/runtimes/rr/secret-injection-rules')).body.data.length, 1);
    assert.ok((await h.call('GET', '/v1/secret-injection-rules')).body.data.some((x: any) => x.id === rule.id));
    const inUse = await h.call('DELETE', '/v1/secrets/tok');
    assert.equal(inUse.status, 409);
    isError(inUse.body, 'failed_precondition');
    await h.call('POST', '/v1/runtimes', { display_name: 'other' });
    assert.equal((await h.call('GET', `/v1/runtimes/other/secret-injection-rules/${rule.id}`)).status, 404);
    assert.equal((await h.call('DELETE', `/v1/runtimes/rr/secret-injection-rules/${rule.id}`)).status, 200);
    const r2 = await h.call('POST', '/v1/runtimes/rr/secret-injection-rules', { host: '*.x.com', path: '/v1/*', injection: { headerName: 'X-Key', paramName: 'key' }, secret: 'tok' });
    assert.equal(r2.status, 201);
    assert.equal((await h.call('DELETE', `/v1/secret-injection-rules/${r2.body.data.id}`)).status, 200);
    assert.equal((await h.call('DELETE', `/v1/secret-injection-rules/${r2.body.data.id}`)).status, 404);
    assert.equal((await h.call('DELETE', '/v1/secrets/tok')).status, 200);
  });
  test('rule validation', async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'rv' });
    await h.call('POST', '/v1/secrets', { name: 'rvs', value: 'v' });
    const cases: Array<[any, number]> = [
      [{ host: 'a.com', injection: { headerName: '' }, secret: 'rvs' }, 400],
      [{ host: 'a.com', injection: {}, secret: 'rvs' }, 400],
      [{ host: 'a.com', injection: { headerName: 'Content-Length' }, secret: 'rvs' }, 400],
      [{ host: 'a.com', injection: { headerName: 'Bad Header' }, secret: 'rvs' }, 400],
      [{ host: 'a.com', injection: { headerName: 'X', paramName: '' }, secret: 'rvs' }, 400],
      [{ host: 'a b', injection: { headerName: 'X' }, secret: 'rvs' }, 400],
      [{ host: 'a.com', path: 'relative', injection: { headerName: 'X' }, secret: 'rvs' }, 400],
      [{ host: 'a.com', injection: { headerName: 'X' }, secret: 'nope' }, 404],
    ];
    for (const [body, status] of cases) {
      const r = await h.call('POST', '/v1/runtimes/rv/secret-injection-rules', body);
      assert.equal(r.status, status, JSON.stringify(body));
    }
    assert.equal((await h.call('POST', '/v1/runtimes/none/secret-injection-rules', { host: 'a.com', injection: { headerName: 'X' }, secret: 'rvs' })).status, 404);
  });
});

describe('checkpoints and audits', () => {
  test('checkpoint create is creating then ready; list, get, delete', async () => {
    const src = (await h.call('POST', '/v1/runtimes', { display_name: 'cp-src' })).body.data;
    const r = await h.call('POST', '/v1/runtimes/cp-src/checkpoints', { kind: 'full', name: 'snap1' });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.state, 'creating');
    assert.equal(r.body.data.source_runtime_id, src.id);
    const systems = (await h.call('GET', '/v1/checkpoints?include_system=true')).body.data.filter((c: { system: boolean }) => c.system);
    assert.ok(systems.length > 0 && systems.every((c: { source_runtime_id: unknown }) => c.source_runtime_id === null));
    await h.core.checkpoints.settled();
    const got = await h.call('GET', '/v1/checkpoints/snap1');
    assert.equal(got.body.data.state, 'ready');
    assert.equal((await h.call('GET', '/v1/checkpoints')).body.data[0].id, r.body.data.id);
    const noName = await h.call('POST', '/v1/runtimes/cp-src/checkpoints', {});
    assert.equal(noName.status, 201);
    assert.match(noName.body.data.display_name, /^cp-src-[0-9a-f]{8}$/);
    const longName = 'l'.repeat(128);
    await h.call('POST', '/v1/runtimes', { display_name: longName });
    const long = await h.call('POST', `/v1/runtimes/${longName}/checkpoints`, {});
    assert.equal(long.status, 201, 'a generated name stays within the limit');
    const fork = await h.call('POST', '/v1/runtimes', { display_name: 'cp-fork', checkpoint: 'snap1' });
    assert.equal(fork.status, 201);
    assert.equal((await h.call('POST', '/v1/runtimes/cp-src/checkpoints', { kind: 'diff' })).status, 400);
    assert.equal((await h.call('POST', '/v1/runtimes/nope/checkpoints', {})).status, 404);
    assert.equal((await h.call('DELETE', '/v1/checkpoints/snap1')).status, 200);
    assert.equal((await h.call('GET', '/v1/checkpoints/snap1')).status, 404);
    assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'cp-fork2', checkpoint: 'snap1' })).status, 404);
  });
  test("a fork takes its checkpoint's resources, with a request of its own up to the checkpoint's limit", async () => {
    await h.call('POST', '/v1/runtimes', { display_name: 'wide-src', resources: { limits: { memory_mib: 2048 }, vcpus: 2 } });
    await h.call('POST', '/v1/runtimes/wide-src/checkpoints', { name: 'wide-cp' });
    await h.core.checkpoints.settled();
    const fork = await h.call('POST', '/v1/runtimes', { display_name: 'wide-fork', checkpoint: 'wide-cp', resources: { requests: { memory_mib: 1024 } } });
    assert.equal(fork.status, 201, JSON.stringify(fork.body));
    assert.deepEqual(fork.body.data.resources, { limits: { memory_mib: 2048 }, requests: { memory_mib: 1024 }, vcpus: 2 });
    const over = await h.call('POST', '/v1/runtimes', { display_name: 'wide-fork2', checkpoint: 'wide-cp', resources: { requests: { memory_mib: 4096 } } });
    assert.equal(over.status, 400);
  });
  test('a failed capture is failed, and a stopped runtime cannot be checkpointed', async () => {
    const driver = h.driver as FakeDriver;
    driver.failNextCheckpoint = true;
    const r = await h.call('POST', '/v1/runtimes/cp-src/checkpoints', { name: 'willfail' });
    await h.core.checkpoints.settled();
    const got = await h.call('GET', `/v1/checkpoints/${r.body.data.id}`);
    assert.equal(got.body.data.state, 'failed');
    await h.call('POST', '/v1/runtimes/cp-src/stop');
    const stopped = await h.call('POST', '/v1/runtimes/cp-src/checkpoints', {});
    assert.equal(stopped.status, 409);
  });
  test('after a restart a damaged checkpoint is failed and never forked; a damaged template is made again', async () => {
    const driver = h.driver as FakeDriver;
    await h.call('POST', '/v1/runtimes', { display_name: 'dmg-src' });
    const cp = (await h.call('POST', '/v1/runtimes/dmg-src/checkpoints', { name: 'dmg' })).body.data;
    await h.core.checkpoints.settled();
    // The template of the default shape, which the plain create below forks.
    const system = (await h.call('GET', '/v1/checkpoints?include_system=true')).body.data.find((c: any) => c.system && c.display_name.endsWith('-512m-1c'));
    driver.damaged.add(cp.id);
    driver.damaged.add(system.id);
    // Captured by this process: known intact, not read again.
    assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'dmg-fork-0', checkpoint: 'dmg' })).status, 201);
    const restarted = await apiHarness({ driver, dir: h.dir });
    try {
      const fork = await restarted.call('POST', '/v1/runtimes', { display_name: 'dmg-fork', checkpoint: 'dmg' });
      assert.equal(fork.status, 409);
      isError(fork.body, 'failed_precondition');
      assert.match(fork.body.error.message, /ram file has changed/);
      const got = (await restarted.call('GET', '/v1/checkpoints/dmg')).body.data;
      assert.equal(got.state, 'failed');
      assert.match(got.state_message, /damaged: its ram file has changed/);
      const again = await restarted.call('POST', '/v1/runtimes', { display_name: 'dmg-fork', checkpoint: 'dmg' });
      assert.match(again.body.error.message, /is failed, not ready: its files are damaged/);
      assert.equal((await restarted.call('GET', '/v1/runtimes/dmg-fork')).status, 404);
      // A plain create gets a new template in place of the damaged one.
      assert.equal((await restarted.call('POST', '/v1/runtimes', { display_name: 'dmg-plain' })).status, 201);
      const systems = (await restarted.call('GET', '/v1/checkpoints?include_system=true')).body.data.filter((c: any) => c.system && c.display_name === system.display_name);
      assert.equal(systems.length, 1);
      assert.notEqual(systems[0].id, system.id, 'the damaged template was replaced');
      assert.equal(driver.checkpoints.has(system.id), false, 'and so are its files');
      assert.equal(driver.verified.filter((id) => id === cp.id).length, 1, 'checked once, then failed for good');
    } finally {
      await restarted.close();
    }
  });
  test('audits list with filters', async () => {
    const rt = (await h.call('POST', '/v1/runtimes', { display_name: 'aud' })).body.data;
    await h.core.audits.record([
      { id: crypto.randomUUID(), tenantId: 'default', runtimeId: rt.id, category: 'egress', createdAt: new Date().toISOString(), payload: { egress: { kind: 'tcp_connection', tcp_connection: { action: 'deny', host: 'x.com', ip: null, port: 443, reason: 'host_not_allowed' } } } },
    ]);
    const all = await h.call('GET', '/v1/audits?category=egress&runtime=aud&limit=5');
    assert.equal(all.status, 200);
    assert.equal(all.body.data.length, 1);
    assert.equal(all.body.data[0].payload.egress.tcp_connection.action, 'deny');
    assert.equal((await h.call('GET', '/v1/audits?category=other')).status, 400);
    assert.equal((await h.call('GET', '/v1/audits?limit=0')).status, 400);
    assert.equal((await h.call('GET', '/v1/audits?runtime=nobody')).status, 404);
  });
  test('list paging', async () => {
    for (let i = 0; i < 5; i++) await h.call('POST', '/v1/secrets', { name: `page-${i}`, value: 'v' });
    const first = await h.call('GET', '/v1/secrets?limit=2');
    assert.equal(first.body.data.length, 2);
    assert.equal(first.body.data[0].display_name, 'page-4');
    const second = await h.call('GET', `/v1/secrets?limit=2&page_token=${first.body.next_page_token}`);
    assert.equal(second.body.data[0].display_name, 'page-2');
    assert.equal((await h.call('GET', '/v1/secrets?limit=1001')).status, 400);
  });
  test('a page_token the service did not issue is invalid_argument on every list, never an empty page', async () => {
    const issued = (await h.call('GET', '/v1/secrets?limit=1')).body.next_page_token as string;
    await h.call('POST', '/v1/runtimes', { display_name: 'page-rt' });
    const bad = ['%7F', '%C2%A1', 'abc%0D%0Adef', '%0A', 'not-a-token', `${issued}x`, issued.slice(0, -1), 'czo', 'czotMQ', '_'.repeat(300)];
    for (const path of ['/v1/runtimes', '/v1/secrets', '/v1/checkpoints', '/v1/secret-injection-rules', '/v1/runtimes/page-rt/secret-injection-rules']) {
      for (const token of bad) {
        const r = await h.call('GET', `${path}?page_token=${token}`);
        assert.equal(r.status, 400, `${path} ${token}: ${JSON.stringify(r.body)}`);
        assert.equal(r.body.error.code, 'invalid_argument');
      }
    }
  });
});
