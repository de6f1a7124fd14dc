/**
 * Generated bad input: thousands of malformed bodies, query strings and paths. Whatever comes
 * in, the answer is never a 5xx and always a well-formed envelope.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fc from 'fast-check';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { ERROR_CODES } from '../../src/core/errors.js';

let h: ApiHarness;
before(async () => {
  h = await apiHarness();
  await h.call('POST', '/v1/runtimes', { display_name: 'fuzz' });
  await h.call('POST', '/v1/secrets', { name: 'fuzz-secret', value: 'fuzz-secret-value' });
});
after(() => h.close());

const ROUTES: Array<[string, string]> = [
  ['POST', '/v1/runtimes'],
  ['PATCH', '/v1/runtimes/fuzz'],
  ['POST', '/v1/runtimes/fuzz/exec'],
  ['POST', '/v1/secrets'],
  ['POST', '/v1/runtimes/fuzz/secret-injection-rules'],
  ['POST', '/v1/runtimes/fuzz/checkpoints'],
  ['POST', '/v1/runtimes/fuzz/stop'],
];

function assertEnvelope(status: number, body: string, where: string) {
  assert.ok(status < 500, `${where} gave ${status}: ${body.slice(0, 300)}`);
  if (status >= 400) {
    const parsed = JSON.parse(body);
    assert.ok(ERROR_CODES.includes(parsed.error.code), where);
    assert.equal(typeof parsed.error.message, 'string', where);
    assert.ok(!body.includes('fuzz-secret-value'), 'no secret in errors');
  }
}

// Values that look like the fields, plus plain junk, nested a little.
const leaf = fc.oneof(
  fc.integer({ min: -3, max: 5 }),
  fc.constantFrom(0, -1, 1, 65535, 65536, 2147483647, 2147483648, 4194304, 4194305, 1e300, 0.5, Number.MAX_SAFE_INTEGER),
  fc.string({ maxLength: 20 }),
  fc.constantFrom('', 'full', 'http', 'https', 'ftp', '*', '*.x.com', 'a.com', '../..', '\u0000', 'fuzz', 'fuzz-secret'),
  fc.boolean(),
  fc.constant(null),
);
const keys = fc.constantFrom(
  'display_name', 'resources', 'limits', 'requests', 'memory_mib', 'vcpus', 'egress_policy', 'allowed_hosts', 'enabled', 'ingress_specs',
  'protocol', 'runtime_port', 'checkpoint', 'command', 'args', 'cwd', 'env', 'stdin', 'max_output_bytes', 'timeout_secs', 'name', 'value',
  'cache_ttl_secs', 'host', 'path', 'secret', 'injection', 'headerName', 'paramName', 'valueFormat', 'kind', '__proto__', 'constructor',
);
const body = fc.letrec((tie) => ({
  node: fc.oneof({ depthSize: 'small' }, leaf, fc.array(tie('node'), { maxLength: 4 }), fc.dictionary(keys, tie('node'), { maxKeys: 6 })),
})).node;

test('malformed JSON bodies never produce a 5xx', async () => {
  await fc.assert(
    fc.asyncProperty(fc.constantFrom(...ROUTES), body, async ([method, url], payload) => {
      const res = await h.app.inject({ method: method as 'POST', url, headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' }, payload: JSON.stringify(payload) });
      assertEnvelope(res.statusCode, res.body, `${method} ${url} ${JSON.stringify(payload).slice(0, 200)}`);
    }),
    { numRuns: 3000 },
  );
});

test('raw junk bodies, query strings and paths never produce a 5xx', async () => {
  const segment = fc.oneof(
    fc.string({ maxLength: 12 }),
    fc.constantFrom('v1', 'runtimes', 'fuzz', 'files', 'secrets', '%', '%zz', '..', '', 'checkpoints', 'audits', 'x'.repeat(300), 'é'.repeat(200)),
  );
  await fc.assert(
    fc.asyncProperty(
      fc.constantFrom('GET', 'POST', 'PUT', 'PATCH', 'DELETE'),
      fc.array(segment, { maxLength: 5 }),
      fc.string({ maxLength: 30 }),
      fc.oneof(fc.string({ maxLength: 50 }), fc.constant('{"a":')),
      async (method, segs, query, raw) => {
        const url = '/' + segs.map((s) => (s.startsWith('%') ? s : encodeURIComponent(s))).join('/') + '?' + query.replace(/#/g, '');
        const res = await h.app.inject({ method: method as 'GET', url, headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' }, ...(method === 'GET' || method === 'DELETE' ? {} : { payload: raw }) });
        assertEnvelope(res.statusCode, res.body, `${method} ${url}`);
      },
    ),
    { numRuns: 2000 },
  );
});

test('query parameters of list routes are validated', async () => {
  await fc.assert(
    fc.asyncProperty(fc.constantFrom('/v1/runtimes', '/v1/secrets', '/v1/checkpoints', '/v1/audits', '/v1/secret-injection-rules'), fc.dictionary(fc.constantFrom('limit', 'page_token', 'include_system', 'category', 'runtime'), fc.string({ maxLength: 8 })), async (path, q) => {
      const res = await h.app.inject({ method: 'GET', url: path, query: q, headers: { authorization: `Bearer ${h.admin}` } });
      assertEnvelope(res.statusCode, res.body, `${path} ${JSON.stringify(q)}`);
    }),
    { numRuns: 1000 },
  );
});
