/**
 * Which requests an API node sends on to a VM host (docs/scaling.md, "What goes where"): each
 * route declares it (`config.forward`), and this walks every operation of the OpenAPI document,
 * and the HEAD of every GET, through the real API with a fleet role whose forwarding answers in
 * place of a host. A route added under a runtime without its declaration fails here.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { OpenAPIV3 } from 'openapi-types';
import type { VmHostOf } from '../../src/api/fleet.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

/** The policy, as docs/scaling.md states it: what needs a VM, its files or its network goes to the host that has them. */
function expectedHost(method: string, path: string): VmHostOf | null {
  if (path.startsWith('/v1/runtimes/{runtime_id}/')) return 'runtime';
  if (path === '/v1/runtimes/{runtime_id}') return method === 'GET' || method === 'HEAD' ? null : 'runtime';
  if (path === '/v1/runtimes' && method === 'POST') return 'create';
  if (path === '/v1/checkpoints/{checkpoint_id}' && method === 'DELETE') return 'checkpoint';
  if (path === '/v1/secret-injection-rules/{rule_id}' && method === 'DELETE') return 'rule';
  return null;
}

const ID = '00000000-0000-4000-8000-000000000000';
const FORWARDED_TO = 'x-test-forwarded-to';
let api: ApiHarness;

before(async () => {
  api = await apiHarness({
    fleet: {
      // Stands in for the Forwarder: answers at once, saying where the request would have gone.
      forward: (to) => (_request, reply) => void reply.code(200).header(FORWARDED_TO, to).send(),
    },
  });
});
after(() => api.close());

test('every operation goes to the VM host the routing policy names, or is answered by the API node', async () => {
  const doc = api.app.swagger() as OpenAPIV3.Document;
  const seen: string[] = [];
  for (const [path, item] of Object.entries(doc.paths)) {
    for (const method of ['get', 'head', 'post', 'put', 'patch', 'delete'] as const) {
      if (item?.[method] === undefined) continue;
      const methods = method === 'get' ? ['GET', 'HEAD'] : [method.toUpperCase()];
      for (const m of methods) {
        const url = path.replace(/\{[^}]+\}/g, ID);
        const res = await api.app.inject({ method: m as 'GET', url, headers: { authorization: `Bearer ${api.admin}` } });
        const to = res.headers[FORWARDED_TO] ?? null;
        assert.equal(to, expectedHost(m, path), `${m} ${path} (answered ${res.statusCode})`);
        seen.push(`${m} ${path}`);
      }
    }
  }
  // The walk reached the forwarded kinds at all (a document without them would pass vacuously).
  for (const op of ['POST /v1/runtimes', 'GET /v1/runtimes/{runtime_id}/terminal', 'PUT /v1/runtimes/{runtime_id}/files', 'DELETE /v1/checkpoints/{checkpoint_id}', 'DELETE /v1/secret-injection-rules/{rule_id}']) {
    assert.ok(seen.includes(op), op);
  }
});

test('a forwarded route is sent on only after the guard admitted its caller', async () => {
  const anonymous = await api.app.inject({ method: 'POST', url: `/v1/runtimes/${ID}/exec`, payload: { command: ['true'] } });
  assert.equal(anonymous.statusCode, 401);
  assert.equal(anonymous.headers[FORWARDED_TO], undefined);
  const reader = await api.token('t1', ['runtimes:read']);
  const unscoped = await api.app.inject({ method: 'DELETE', url: `/v1/runtimes/${ID}`, headers: { authorization: `Bearer ${reader}` } });
  assert.equal(unscoped.statusCode, 403);
  assert.equal(unscoped.headers[FORWARDED_TO], undefined);
});
