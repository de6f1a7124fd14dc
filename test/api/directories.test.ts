/**
 * The directory routes over the fake driver: their OpenAPI schemas, envelopes, validation,
 * scopes, tenancy and runtime state. What the guest does is test/unit/guest-directories.test.ts
 * (the agent on the host) and test/vm/directories.test.ts (a real VM).
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';

const driver = new FakeDriver();
let h: ApiHarness;
before(async () => {
  h = await apiHarness({ driver });
  assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'dirs' })).status, 201);
});
after(() => h.close());

const q = encodeURIComponent;
const isError = (r: { status: number; body: any }, status: number, code: string) => {
  assert.equal(r.status, status, JSON.stringify(r.body));
  assert.equal(r.body.error.code, code, JSON.stringify(r.body));
  assert.equal(typeof r.body.error.message, 'string');
};

const ROUTES = [
  ['get', '/v1/runtimes/{runtime_id}/files/list', 'files:read'],
  ['get', '/v1/runtimes/{runtime_id}/files/stat', 'files:read'],
  ['post', '/v1/runtimes/{runtime_id}/files/mkdir', 'files:write'],
  ['delete', '/v1/runtimes/{runtime_id}/files', 'files:write'],
  ['get', '/v1/runtimes/{runtime_id}/files/archive', 'files:read'],
  ['put', '/v1/runtimes/{runtime_id}/files/archive', 'files:write'],
] as const;
const url = (path: string, query: string) => `${path.replace('{runtime_id}', 'dirs')}?${query}`;

test('every directory route is in the OpenAPI document with its parameters, success and error responses', async () => {
  const doc = (await h.call('GET', '/openapi.json', undefined, null)).body;
  for (const [method, path] of ROUTES) {
    const op = doc.paths[path]?.[method];
    assert.ok(op, `${method} ${path}`);
    assert.deepEqual(op.tags, ['files']);
    // Parameters that several operations share are references to components.parameters.
    const params = op.parameters.map((p: any) => (p.$ref === undefined ? p : doc.components.parameters[p.$ref.split('/').pop()])).map((p: any) => `${p.in}:${p.name}:${p.required === true}`);
    assert.ok(params.includes('path:runtime_id:true') && params.includes('query:path:true'), `${method} ${path}: ${params}`);
    for (const status of ['200', '400', '401', '403', '404', '409', '429', '500', '503', '504']) assert.ok(op.responses[status], `${method} ${path} documents ${status}`);
  }
  const ok = (method: string, path: string) => doc.paths[path][method].responses['200'].content;
  assert.deepEqual(ok('get', '/v1/runtimes/{runtime_id}/files/list')['application/json'].schema.properties.data, { type: 'array', items: { $ref: '#/components/schemas/FileInfo' } });
  assert.equal(ok('get', '/v1/runtimes/{runtime_id}/files/stat')['application/json'].schema.properties.data.$ref, '#/components/schemas/FileStat');
  assert.deepEqual(ok('get', '/v1/runtimes/{runtime_id}/files/archive')['application/x-tar'].schema, { type: 'string', format: 'binary' });
  assert.equal(ok('put', '/v1/runtimes/{runtime_id}/files/archive')['application/json'].schema.properties.data.$ref, '#/components/schemas/FileWritten');
  assert.deepEqual(doc.paths['/v1/runtimes/{runtime_id}/files/archive'].put.requestBody.content['application/x-tar'].schema, { type: 'string', format: 'binary' });
  const stat = doc.paths['/v1/runtimes/{runtime_id}/files/stat'].get.parameters.find((p: any) => p.name === 'follow_symlinks');
  assert.deepEqual([stat.in, stat.schema.type, stat.schema.default], ['query', 'boolean', true]);
  const recursive = doc.paths['/v1/runtimes/{runtime_id}/files'].delete.parameters.find((p: any) => p.name === 'recursive');
  assert.deepEqual([recursive.in, recursive.schema.type, recursive.schema.default], ['query', 'boolean', false]);
  const info = doc.components.schemas.FileInfo;
  assert.deepEqual(Object.keys(info.properties).sort(), ['mode', 'modified_at', 'name', 'path', 'size_bytes', 'type']);
  assert.deepEqual(info.properties.type.enum, ['file', 'directory', 'symlink', 'char', 'block', 'fifo', 'socket', 'other']);
  assert.deepEqual(Object.keys(doc.components.schemas.FileStat.properties).sort(), ['gid', 'mode', 'modified_at', 'name', 'path', 'size_bytes', 'type', 'uid']);
  // The two operations of the spec keep their shape.
  const files = doc.paths['/v1/runtimes/{runtime_id}/files'];
  assert.deepEqual(Object.keys(files.get.responses['200'].content), ['application/octet-stream']);
  assert.equal(files.put.responses['200'].content['application/json'].schema.properties.data.$ref, '#/components/schemas/FileWritten');
});

test('mkdir, list, stat and remove: envelopes and shapes', async () => {
  let r = await h.call('POST', url('/v1/runtimes/{runtime_id}/files/mkdir', `path=${q('/w/a/b')}`));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, { data: { path: '/w/a/b' } });
  await h.app.inject({ method: 'PUT', url: url('/v1/runtimes/{runtime_id}/files', 'path=/w/a/f.txt'), headers: { authorization: `Bearer ${h.admin}` }, payload: 'hey' });
  r = await h.call('GET', url('/v1/runtimes/{runtime_id}/files/list', 'path=/w/a'));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.data, [
    { name: 'b', path: '/w/a/b', type: 'directory', size_bytes: 0, mode: 0o755, modified_at: '1970-01-01T00:00:00.000Z' },
    { name: 'f.txt', path: '/w/a/f.txt', type: 'file', size_bytes: 3, mode: 0o644, modified_at: '1970-01-01T00:00:00.000Z' },
  ]);
  r = await h.call('GET', url('/v1/runtimes/{runtime_id}/files/stat', 'path=/w/a/f.txt&follow_symlinks=false'));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body.data, { name: 'f.txt', path: '/w/a/f.txt', type: 'file', size_bytes: 3, mode: 0o644, modified_at: '1970-01-01T00:00:00.000Z', uid: 0, gid: 0 });
  isError(await h.call('DELETE', url('/v1/runtimes/{runtime_id}/files', 'path=/w/a')), 409, 'failed_precondition');
  isError(await h.call('DELETE', url('/v1/runtimes/{runtime_id}/files', 'path=/w/a&recursive=false')), 409, 'failed_precondition');
  r = await h.call('DELETE', url('/v1/runtimes/{runtime_id}/files', 'path=/w/a&recursive=true'));
  assert.equal(r.status, 200, JSON.stringify(r.body));
  assert.deepEqual(r.body, { data: {} });
  isError(await h.call('GET', url('/v1/runtimes/{runtime_id}/files/list', 'path=/w/a')), 404, 'not_found');
  isError(await h.call('GET', url('/v1/runtimes/{runtime_id}/files/stat', 'path=/w/a')), 404, 'not_found');
});

test('paths and flags are validated before the guest is asked', async () => {
  for (const [method, path] of ROUTES) {
    for (const query of ['path=relative/x', 'path=', '', `path=${q('/a\0b')}`, `path=${'/x'.repeat(2049)}`]) {
      isError(await h.call(method.toUpperCase() as 'GET', url(path, query)), 400, 'invalid_argument');
    }
  }
  isError(await h.call('GET', url('/v1/runtimes/{runtime_id}/files/stat', 'path=/w&follow_symlinks=maybe')), 400, 'invalid_argument');
  isError(await h.call('DELETE', url('/v1/runtimes/{runtime_id}/files', 'path=/w&recursive=yes')), 400, 'invalid_argument');
  // The root under any spelling: the agent itself refuses only the literal '/'.
  const removed: string[] = [];
  const real = driver.removePath.bind(driver);
  driver.removePath = async (id, path, recursive) => {
    removed.push(path);
    return real(id, path, recursive);
  };
  try {
    for (const root of ['/', '//', '/.', '/tmp/..', '/./']) {
      const r = await h.call('DELETE', url('/v1/runtimes/{runtime_id}/files', `path=${q(root)}&recursive=true`));
      isError(r, 400, 'invalid_argument');
      assert.match(r.body.error.message, /root directory/);
    }
    assert.deepEqual(removed, []);
  } finally {
    driver.removePath = real;
  }
});

test('scopes, tenancy and runtime state apply as for the file routes', async () => {
  const reader = await h.token('default', ['files:read']);
  const writer = await h.token('default', ['files:write']);
  for (const [method, path, scope] of ROUTES) {
    const r = await h.call(method.toUpperCase() as 'GET', url(path, 'path=/w'), undefined, scope === 'files:read' ? writer : reader);
    isError(r, 403, 'permission_denied');
  }
  const stranger = await h.token('someone-else', ['files:read', 'files:write']);
  for (const [method, path] of ROUTES) isError(await h.call(method.toUpperCase() as 'GET', url(path, 'path=/w'), undefined, stranger), 404, 'not_found');
  assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'stopped' })).status, 201);
  assert.equal((await h.call('POST', '/v1/runtimes/stopped/stop')).status, 200);
  for (const [method, path] of ROUTES) {
    const r = await h.call(method.toUpperCase() as 'GET', url(path, 'path=/w').replace('/dirs/', '/stopped/'));
    isError(r, 409, 'failed_precondition');
    assert.match(r.body.error.message, /must be running/);
  }
});

test('an archive upload body is a raw stream whatever its media type; driver failures are envelopes', async () => {
  const seen: Array<{ dir: string; bytes: number; max: number }> = [];
  const d: FakeDriver = driver; // its own writeArchive until the end of the test
  d.writeArchive = async (_id, dir, body, max) => {
    let bytes = 0;
    for await (const c of body) bytes += (c as Buffer).length;
    seen.push({ dir, bytes, max });
    return bytes;
  };
  try {
    for (const type of ['application/x-tar', 'application/octet-stream', 'application/json']) {
      const res = await h.app.inject({
        method: 'PUT',
        url: url('/v1/runtimes/{runtime_id}/files/archive', 'path=/up'),
        headers: { authorization: `Bearer ${h.admin}`, 'content-type': type },
        payload: Buffer.alloc(2048, 7),
      });
      assert.equal(res.statusCode, 200, `${type}: ${res.body}`);
      assert.deepEqual(JSON.parse(res.body), { data: { path: '/up', size_bytes: 2048 } });
    }
    assert.deepEqual(seen[0], { dir: '/up', bytes: 2048, max: 1024 * 1024 }, 'the PUT limit applies to archives');
  } finally {
    delete (driver as Partial<FakeDriver>).writeArchive;
  }
  // The fake makes no archives: its refusal is the error envelope, not a broken 200.
  isError(await h.call('GET', url('/v1/runtimes/{runtime_id}/files/archive', 'path=/w')), 501, 'unimplemented');
});
