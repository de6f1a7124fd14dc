/**
 * The server does what its OpenAPI document says: every operation answered, each answer with a
 * status, headers and body the document declares; and the points where document and server
 * once disagreed (issue 14): raw bodies, port 0, an optional checkpoint body, audit paging,
 * the request id on every response, the envelope while the service shuts down.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect, type AddressInfo } from 'node:net';
import type { InjectOptions } from 'fastify';
import type { OpenAPIV3 } from 'openapi-types';
import WebSocket from 'ws';
import { WEBSOCKET_PROTOCOL } from '../../src/api/websocket-auth.js';
import type { Audit, EgressAuditDetails, EgressAuditKind } from '../../src/core/types.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { dereferenced, nameOf, operationsOf, ResponseChecker, servedDocument } from '../support/openapi.js';

let h: ApiHarness;
let doc: OpenAPIV3.Document;
let checker: ResponseChecker;
let base: string;
before(async () => {
  h = await apiHarness({ driver: new FakeDriver() });
  doc = await servedDocument(h);
  checker = new ResponseChecker(await dereferenced(doc));
  await h.app.listen({ host: '127.0.0.1', port: 0 });
  base = `http://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
});
after(() => h.close());

interface Send {
  /** JSON, or raw bytes when a Buffer. */
  body?: unknown;
  headers?: Record<string, string>;
  token?: string | null;
  /** Over a real socket: an event stream needs one (the injected socket reads as closed). */
  live?: boolean;
}

/** One request through the real API, its answer checked against the document. */
async function send(method: InjectOptions['method'] & string, url: string, { body, headers = {}, token = h.admin, live = false }: Send = {}) {
  const all = { ...(token === null ? {} : { authorization: `Bearer ${token}` }), ...headers };
  const res = live ? await overSocket(method, url, all, body) : await h.app.inject({ method, url, headers: all, ...(body === undefined ? {} : { payload: Buffer.isBuffer(body) ? body : (body as object) }) });
  checker.check(method, url, res);
  const json = String(res.headers['content-type'] ?? '').startsWith('application/json') && res.body !== '' ? JSON.parse(res.body) : undefined;
  return { status: res.statusCode, headers: res.headers, body: json, raw: res.rawPayload };
}

async function overSocket(method: string, url: string, headers: Record<string, string>, body: unknown) {
  const json = body !== undefined && !Buffer.isBuffer(body);
  const res = await fetch(base + url, {
    method,
    headers: json ? { 'content-type': 'application/json', ...headers } : headers,
    ...(body === undefined ? {} : { body: json ? JSON.stringify(body) : new Uint8Array(body as Buffer) }),
  });
  const rawPayload = Buffer.from(await res.arrayBuffer());
  return { statusCode: res.status, headers: Object.fromEntries(res.headers), body: rawPayload.toString(), rawPayload };
}

/** What the gateway records, one of each kind (src/net), as the store keeps it. */
function egressAudits(runtimeId: string): Audit[] {
  const details: { [K in EgressAuditKind]: EgressAuditDetails[K] } = {
    tcp_connection: { action: 'allow', host: 'api.example.com', ip: '192.0.2.7', port: 443, reason: 'host_allowed' },
    http_request: { action: 'deny', host: 'evil.example', ip: null, port: 80, method: 'GET', path: '/x', reason: 'host_not_allowed', status: 403, rule_ids: [] },
    icmp_drop: { action: 'deny', host: null, ip: null, port: null, reason: 'icmp_dropped', count: 3 },
  };
  return Object.entries(details).map(([kind, detail]) => ({
    id: randomUUID(),
    tenantId: 'default',
    runtimeId,
    category: 'egress',
    createdAt: new Date().toISOString(),
    payload: { egress: { kind: kind as EgressAuditKind, [kind]: detail } },
  }));
}

async function until(check: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 200 && !(await check()); i++) await new Promise((r) => setTimeout(r, 10));
}

test('every operation answers as the document declares: status, headers and body', async () => {
  const rt = '/v1/runtimes/doc-rt';
  await send('GET', '/healthz', { token: null });
  await send('HEAD', '/healthz', { token: null });
  const created = await send('POST', '/v1/runtimes', { body: { display_name: 'doc-rt', ingress_specs: [{ protocol: 'http', runtime_port: 8000 }] } });
  assert.equal(created.status, 201);
  await send('GET', '/v1/runtimes?limit=1');
  await send('GET', rt);
  await send('PATCH', rt, { body: { egress_policy: { enabled: true, allowed_hosts: ['api.example.com'] }, resources: { requests: { memory_mib: 256 } } } });

  // Commands and processes.
  assert.equal((await send('POST', `${rt}/exec`, { body: { command: 'echo hi' } })).status, 200);
  const streamed = await send('POST', `${rt}/exec`, { body: { command: 'echo', args: ['hi'] }, headers: { accept: 'text/event-stream' }, live: true });
  assert.match(streamed.raw.toString(), /event: start[\s\S]*event: stdout[\s\S]*event: exit/);
  const started = await send('POST', `${rt}/processes`, { body: { command: 'cat', stdin: true } });
  assert.equal(started.status, 201);
  const pid = started.body.data.id;
  await send('GET', `${rt}/processes`);
  await send('GET', `${rt}/processes/${pid}`);
  assert.equal((await send('POST', `${rt}/processes/${pid}/stdin?eof=true`, { body: Buffer.from('input'), headers: { 'content-type': 'application/octet-stream' } })).status, 200);
  assert.match((await send('GET', `${rt}/processes/${pid}/output?follow=false`, { live: true })).raw.toString(), /event: start[\s\S]*event: stdout[\s\S]*event: exit/);
  assert.equal((await send('POST', `${rt}/processes/${pid}/signal`, { body: { signal: 'SIGTERM' } })).status, 200);
  assert.equal((await send('DELETE', `${rt}/processes/${pid}`)).status, 200);
  assert.equal((await send('GET', `${rt}/terminal`)).status, 400, 'without an upgrade');

  // Files and directories.
  await send('PUT', `${rt}/files?path=/w/a.bin`, { body: Buffer.from([0, 1, 255]), headers: { 'content-type': 'application/octet-stream' } });
  await send('GET', `${rt}/files?path=/w/a.bin`);
  await send('GET', `${rt}/files/stat?path=/w/a.bin`);
  await send('GET', `${rt}/files/list?path=/w`);
  await send('POST', `${rt}/files/mkdir?path=/w/d`);
  await send('DELETE', `${rt}/files?path=/w/d`);
  // The fake driver makes no archives (501, which only `default` declares).
  await send('GET', `${rt}/files/archive?path=/w`);
  await send('PUT', `${rt}/files/archive?path=/w`, { body: Buffer.from('not a tar'), headers: { 'content-type': 'application/x-tar' } });

  // Secrets and rules.
  await send('POST', '/v1/secrets', { body: { name: 'doc-secret', value: 's3cret' } });
  await send('GET', '/v1/secrets');
  await send('GET', '/v1/secrets/doc-secret');
  const rule = await send('POST', `${rt}/secret-injection-rules`, { body: { host: 'api.example.com', secret: 'doc-secret', injection: { headerName: 'X-Key' } } });
  await send('GET', `${rt}/secret-injection-rules`);
  await send('GET', `${rt}/secret-injection-rules/${rule.body.data.id}`);
  await send('GET', '/v1/secret-injection-rules');
  await send('DELETE', `${rt}/secret-injection-rules/${rule.body.data.id}`);
  const again = await send('POST', `${rt}/secret-injection-rules`, { body: { host: 'api.example.com', path: '/v1/**', secret: 'doc-secret', injection: { headerName: 'X-Key', valueFormat: 'Bearer ${credential}' } } });
  await send('DELETE', `/v1/secret-injection-rules/${again.body.data.id}`);
  await send('DELETE', '/v1/secrets/doc-secret');

  // Checkpoints and audits.
  const cp = await send('POST', `${rt}/checkpoints`, { body: { name: 'doc-cp' } });
  assert.equal(cp.status, 201);
  await until(async () => (await h.call('GET', '/v1/checkpoints/doc-cp')).body.data.state !== 'creating');
  await send('GET', '/v1/checkpoints?include_system=true');
  await send('GET', '/v1/checkpoints/doc-cp');
  await send('DELETE', '/v1/checkpoints/doc-cp');
  await send('POST', '/v1/templates', { body: { name: 'doc-tpl', image: 'registry.example.com/team/py:3.12' } });
  await send('POST', '/v1/templates?name=doc-archive', { body: Buffer.from('docker save bytes'), headers: { 'content-type': 'application/x-tar' } });
  await h.core.templates.settled();
  await send('GET', '/v1/templates');
  await send('GET', '/v1/templates/doc-tpl');
  await send('GET', '/v1/templates/doc-tpl/build', { headers: { accept: 'text/event-stream' }, live: true });
  await send('DELETE', '/v1/templates/doc-archive');
  await h.core.audits.record(egressAudits(created.body.data.id));
  const audits = await send('GET', '/v1/audits?runtime=doc-rt');
  assert.deepEqual(audits.body.data.map((a: { payload: { egress: { kind: string } } }) => a.payload.egress.kind).sort(), ['http_request', 'icmp_drop', 'tcp_connection']);

  // The console log, and tokens.
  assert.equal((await send('GET', `${rt}/console-log?max_bytes=1024`)).status, 200);
  const token = await send('POST', '/v1/tokens', { body: { tenant: 'doc-tenant', scopes: ['runtimes:read'], name: 'doc' } });
  assert.equal(token.status, 201);
  await send('GET', '/v1/tokens?tenant=doc-tenant&limit=1');
  await send('GET', `/v1/tokens/${token.body.data.id}`);
  assert.equal((await send('DELETE', `/v1/tokens/${token.body.data.id}`)).status, 200);
  assert.equal((await send('DELETE', `/v1/tokens/${randomUUID()}`)).status, 404);

  // Lifecycle, then the errors each kind of failure gets.
  for (const op of ['pause', 'resume', 'suspend', 'resume', 'stop', 'start']) assert.equal((await send('POST', `${rt}/${op}`)).status, 200, op);
  assert.equal((await send('POST', `${rt}/resume`)).status, 409);
  assert.equal((await send('GET', '/v1/secrets', { token: null })).status, 401);
  assert.equal((await send('GET', '/v1/secrets', { token: await h.token('default', ['runtimes:read']) })).status, 403);
  assert.equal((await send('GET', '/v1/runtimes/nobody')).status, 404);
  assert.equal((await send('PUT', '/v1/secrets')).status, 405);
  assert.equal((await send('POST', '/v1/secrets', { body: { name: 'big', value: 'x'.repeat(2 * 1024 * 1024) } })).status, 413);
  assert.equal((await send('POST', '/v1/secrets', { body: Buffer.from('x'), headers: { 'content-type': 'text/plain' } })).status, 415);
  assert.equal((await send('POST', `${rt}/exec`, { body: { command: 'x', background: true } })).status, 400);
  await send('DELETE', rt);

  const all = operationsOf(doc).map(nameOf);
  assert.deepEqual(all.filter((name) => !checker.answered.has(name)), [], 'every operation was answered');
});

test('429 and its Retry-After are as documented', async () => {
  const limited = await apiHarness({ rate: { ratePerSec: 1, burst: 1 } });
  try {
    await limited.call('GET', '/v1/secrets');
    const res = await limited.app.inject({ method: 'GET', url: '/v1/secrets', headers: { authorization: `Bearer ${limited.admin}` } });
    assert.equal(res.statusCode, 429);
    checker.check('GET', '/v1/secrets', res);
  } finally {
    await limited.close();
  }
});

test('a file PUT of raw bytes round-trips, whatever its Content-Type', async () => {
  await h.call('POST', '/v1/runtimes', { display_name: 'raw-rt' });
  const bytes = Buffer.from(Array.from({ length: 512 }, (_, i) => i % 256));
  for (const type of ['application/octet-stream', 'text/plain', 'application/json', undefined]) {
    const put = await send('PUT', `/v1/runtimes/raw-rt/files?path=/raw/${type ?? 'none'}`, { body: bytes, headers: type === undefined ? {} : { 'content-type': type } });
    assert.deepEqual(put.body, { data: { path: `/raw/${type ?? 'none'}`, size_bytes: 512 } }, String(type));
    const got = await send('GET', `/v1/runtimes/raw-rt/files?path=/raw/${type ?? 'none'}`);
    assert.equal(got.headers['content-type'], 'application/octet-stream');
    assert.ok(got.raw.equals(bytes), String(type));
  }
});

test('runtime_port is 1 to 65535: 0 is refused, as the document says', async () => {
  const create = (name: string, port: number) => send('POST', '/v1/runtimes', { body: { display_name: name, ingress_specs: [{ protocol: 'http', runtime_port: port }] } });
  assert.equal((await create('port-0', 0)).status, 400);
  assert.equal((await create('port-65536', 65536)).status, 400);
  assert.equal((await create('port-1', 1)).status, 201);
  assert.equal((await create('port-65535', 65535)).status, 201);
});

test('POST …/checkpoints takes no body, an empty one, {} or null; kind is full', async () => {
  await h.call('POST', '/v1/runtimes', { display_name: 'cp-body' });
  const bodies: Array<[string, Send]> = [
    ['none', {}],
    ['empty JSON', { body: Buffer.alloc(0), headers: { 'content-type': 'application/json' } }],
    ['{}', { body: {} }],
    ['null', { body: Buffer.from('null'), headers: { 'content-type': 'application/json' } }],
    ['kind full', { body: { kind: 'full' } }],
  ];
  for (const [what, request] of bodies) {
    const r = await send('POST', '/v1/runtimes/cp-body/checkpoints', request);
    assert.equal(r.status, 201, `${what}: ${JSON.stringify(r.body)}`);
    assert.equal(r.body.data.state, 'creating');
    await until(async () => (await h.call('GET', `/v1/checkpoints/${r.body.data.id}`)).body.data.state !== 'creating');
  }
  assert.equal((await send('POST', '/v1/runtimes/cp-body/checkpoints', { body: { kind: 'diff' } })).status, 400);
});

test('stated defaults are the ones the server applies', async () => {
  const secret = await send('POST', '/v1/secrets', { body: { name: 'ttl-default', value: 'v' } });
  assert.equal(secret.body.data.cache_ttl_secs, 0);
  await h.call('POST', '/v1/runtimes', { display_name: 'defaults' });
  const exec = await send('POST', '/v1/runtimes/defaults/exec', { body: { command: 'echo $HOME' } });
  assert.equal(exec.status, 200);
  const proc = await send('POST', '/v1/runtimes/defaults/processes', { body: { command: 'true' } });
  assert.equal(proc.body.data.command, 'true', 'args [] adds nothing to the command');
});

test('audits are paged with page_token, newest first, like every list', async () => {
  const rt = (await h.call('POST', '/v1/runtimes', { display_name: 'paged-audits' })).body.data;
  const recorded = [...egressAudits(rt.id), ...egressAudits(rt.id)];
  await h.core.audits.record(recorded);
  const seen: string[] = [];
  let url = '/v1/audits?runtime=paged-audits&limit=4';
  for (let pages = 0; pages < 5; pages++) {
    const page = await send('GET', url);
    seen.push(...page.body.data.map((a: { id: string }) => a.id));
    if (page.body.next_page_token === undefined) break;
    url = `/v1/audits?runtime=paged-audits&limit=4&page_token=${page.body.next_page_token}`;
  }
  assert.deepEqual(seen, recorded.map((a) => a.id).reverse());
  assert.equal((await send('GET', '/v1/audits?page_token=bm90LW91cnM')).status, 400, 'a token the service did not issue');
});

test('every response carries x-request-id: a malformed URL too, and a client\'s own id comes back', async () => {
  const malformed = await h.app.inject({ method: 'GET', url: '/v1/runtimes/%E0%A4%A', headers: { authorization: `Bearer ${h.admin}` } });
  assert.equal(malformed.statusCode, 400);
  assert.ok(malformed.headers['x-request-id']);
  const own = await send('GET', '/healthz', { token: null, headers: { 'x-request-id': 'client-42.a' } });
  assert.equal(own.headers['x-request-id'], 'client-42.a');
});

test('a terminal upgrade (101) carries x-request-id and selects vessel.v1', async () => {
  const terminals = await apiHarness({ driver: new FakeDriver() });
  try {
    await terminals.call('POST', '/v1/runtimes', { display_name: 'term' });
    await terminals.app.listen({ host: '127.0.0.1', port: 0 });
    const port = (terminals.app.server.address() as AddressInfo).port;
    const ws = new WebSocket(`ws://127.0.0.1:${port}/v1/runtimes/term/terminal`, [WEBSOCKET_PROTOCOL], { headers: { authorization: `Bearer ${terminals.admin}` } });
    const headers = await new Promise<Record<string, unknown>>((resolve, reject) => {
      ws.once('upgrade', (res) => resolve(res.headers));
      ws.once('error', reject);
    });
    await new Promise((resolve) => (ws.readyState === ws.OPEN ? resolve(undefined) : ws.once('open', resolve)));
    ws.close();
    assert.equal(typeof headers['x-request-id'], 'string');
    assert.match(headers['x-request-id'] as string, /^[\w.-]+$/);
    assert.equal(headers['sec-websocket-protocol'], WEBSOCKET_PROTOCOL);
  } finally {
    await terminals.close();
  }
});

test('a request that comes while the service shuts down gets 503 unavailable, in the envelope, with Retry-After', async () => {
  const driver = new FakeDriver();
  const closing = await apiHarness({ driver });
  try {
    await closing.call('POST', '/v1/runtimes', { display_name: 'busy' });
    let release!: () => void;
    let running!: () => void;
    const isRunning = new Promise<void>((resolve) => (running = resolve));
    const released = new Promise<void>((resolve) => (release = resolve));
    const spawn = driver.spawnProcess.bind(driver);
    driver.spawnProcess = async (id, spec) => {
      running();
      await released;
      return spawn(id, spec);
    };
    await closing.app.listen({ host: '127.0.0.1', port: 0 });
    const socket = connect((closing.app.server.address() as AddressInfo).port, '127.0.0.1');
    let received = '';
    socket.on('data', (d) => (received += d.toString('latin1')));
    const ended = new Promise((resolve) => socket.once('close', resolve));
    const body = JSON.stringify({ command: 'true' });
    // An exec in flight keeps its connection open through close(); the next request comes on it.
    socket.write(`POST /v1/runtimes/busy/exec HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${closing.admin}\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
    await isRunning;
    const closed = closing.app.close();
    await until(async () => !closing.app.server.listening);
    socket.write(`GET /v1/runtimes/busy HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer ${closing.admin}\r\n\r\n`);
    await new Promise((r) => setTimeout(r, 50));
    release();
    await Promise.all([closed, ended]);
    const [first, second] = received.split(/(?=HTTP\/1\.1 )/);
    assert.match(first ?? '', /^HTTP\/1\.1 200 /, 'the request in flight finishes');
    assert.match(second ?? '', /^HTTP\/1\.1 503 /, received);
    assert.match(second!, /\r\nretry-after: 1\r\n/i);
    assert.match(second!, /\r\nx-request-id: \S+\r\n/i);
    assert.deepEqual(JSON.parse(second!.slice(second!.indexOf('\r\n\r\n') + 4)), { error: { code: 'unavailable', message: 'the service is shutting down' } });
  } finally {
    await closing.close().catch(() => undefined);
  }
});
