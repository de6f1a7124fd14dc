/**
 * Token management through the API: admin scope only, validation, paging, revocation that takes
 * effect at once, the refusals that keep a service with an admin, and a created token's value in
 * no response or log line but its creation reply.
 */
import { test, before, after, describe } from 'node:test';
import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { randomUUID } from 'node:crypto';
import pino from 'pino';
import type { FastifyBaseLogger } from 'fastify';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { maskTokens, serviceLogOptions } from '../../src/api/log-options.js';
import { ADMIN_TOKEN_ID } from '../../src/core/tokens.js';
import { SCOPES, type Scope } from '../../src/core/types.js';

/** Every scope but admin: a tenant's most powerful token. */
const ALL_BUT_ADMIN = SCOPES.filter((s) => s !== 'admin') as Scope[];
const TOKEN_VALUE = /^vsl_[A-Za-z0-9_-]{43}$/;

let h: ApiHarness;
before(async () => {
  h = await apiHarness();
});
after(() => h.close());

const create = (body: object, token?: string) => h.call('POST', '/v1/tokens', body, token);

describe('create', () => {
  test('an admin makes a token for any tenant; the value works at once and is shown once', async () => {
    const r = await create({ tenant: 'acme', scopes: ['runtimes:read', 'exec', 'exec'], name: 'ci' });
    assert.equal(r.status, 201, JSON.stringify(r.body));
    assert.equal(r.headers['cache-control'], 'no-store');
    const t = r.body.data;
    assert.match(t.token, TOKEN_VALUE);
    assert.deepEqual(Object.keys(t).sort(), ['created_at', 'id', 'name', 'revoked_at', 'scopes', 'tenant', 'token']);
    assert.deepEqual([t.tenant, t.name, t.scopes, t.revoked_at], ['acme', 'ci', ['runtimes:read', 'exec'], null]);
    // The new token acts for its tenant, with its scopes only.
    assert.deepEqual((await h.call('GET', '/v1/runtimes', undefined, t.token)).body, { data: [] });
    assert.equal((await h.call('GET', '/v1/secrets', undefined, t.token)).body.error.code, 'permission_denied');
    // Stored as a hash: the record read back has no value.
    const got = await h.call('GET', `/v1/tokens/${t.id}`);
    assert.equal(got.status, 200);
    const { token: _value, ...record } = t;
    assert.deepEqual(got.body.data, record);
  });

  test('the name defaults to "token"', async () => {
    const r = await create({ tenant: 'acme', scopes: ['audits:read'] });
    assert.equal(r.status, 201);
    assert.equal(r.body.data.name, 'token');
  });

  test('an admin may mint admin tokens, of any tenant, which manage every tenant\'s tokens', async () => {
    const r = await create({ tenant: 'ops', scopes: ['admin'] });
    assert.equal(r.status, 201);
    const list = await h.call('GET', '/v1/tokens?tenant=acme', undefined, r.body.data.token);
    assert.equal(list.status, 200);
    assert.ok(list.body.data.length >= 1 && list.body.data.every((t: { tenant: string }) => t.tenant === 'acme'));
  });

  test('bad bodies are invalid_argument', async () => {
    const bad: object[] = [
      {},
      { scopes: ['exec'] },
      { tenant: 'acme' },
      { tenant: 'acme', scopes: [] },
      { tenant: 'acme', scopes: ['root'] },
      { tenant: 'acme', scopes: 'exec' },
      { tenant: 'has space', scopes: ['exec'] },
      { tenant: '', scopes: ['exec'] },
      { tenant: 'x'.repeat(129), scopes: ['exec'] },
      { tenant: randomUUID(), scopes: ['exec'] },
      { tenant: 'acme', scopes: ['exec'], name: 'bad/name' },
      { tenant: 'acme', scopes: ['exec'], name: '' },
      { tenant: 'acme', scopes: ['exec'], extra: 1 },
      { tenant: 7, scopes: ['exec'] },
    ];
    for (const body of bad) {
      const r = await create(body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.body.error.code, 'invalid_argument', JSON.stringify(body));
    }
    const raw = await h.app.inject({ method: 'POST', url: '/v1/tokens', headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' }, payload: '{"tenant":' });
    assert.equal(raw.statusCode, 400);
  });
});

describe('scopes and authentication', () => {
  test("a tenant's token without admin gets permission_denied on every token route, even with every other scope", async () => {
    const strong = await h.token('acme', ALL_BUT_ADMIN);
    const existing = (await create({ tenant: 'acme', scopes: ['exec'] })).body.data.id;
    const routes: Array<[string, string, object?]> = [
      ['POST', '/v1/tokens', { tenant: 'acme', scopes: ['admin'] }],
      ['GET', '/v1/tokens'],
      ['GET', `/v1/tokens/${existing}`],
      ['DELETE', `/v1/tokens/${existing}`],
    ];
    for (const [method, url, body] of routes) {
      const r = await h.call(method as 'GET', url, body, strong);
      assert.equal(r.status, 403, `${method} ${url}`);
      assert.equal(r.body.error.code, 'permission_denied');
      const none = await h.call(method as 'GET', url, body, null);
      assert.equal(none.status, 401, `${method} ${url}`);
      assert.equal(none.body.error.code, 'unauthenticated');
      const unknown = await h.call(method as 'GET', url, body, 'vsl_not-a-token');
      assert.equal(unknown.status, 401);
    }
    // Nothing was revoked nor made by the refused calls.
    assert.equal((await h.call('GET', `/v1/tokens/${existing}`)).body.data.revoked_at, null);
  });

  test('rate limiting applies to the token routes as to any other', async () => {
    const limited = await apiHarness({ rate: { ratePerSec: 0.001, burst: 2 } });
    try {
      assert.equal((await limited.call('GET', '/v1/tokens')).status, 200);
      assert.equal((await limited.call('POST', '/v1/tokens', { tenant: 'a', scopes: ['exec'] })).status, 201);
      const r = await limited.call('POST', '/v1/tokens', { tenant: 'a', scopes: ['exec'] });
      assert.equal(r.status, 429);
      assert.equal(r.body.error.code, 'rate_limited');
      assert.ok(Number(r.headers['retry-after']) >= 1);
      // The refused create made nothing.
      assert.equal((await limited.core.tokens.list()).filter((t) => t.tenantId === 'a').length, 1);
    } finally {
      await limited.close();
    }
  });
});

describe('list and get', () => {
  test('pages newest first, filters by tenant, and never shows a value or a hash', async () => {
    const made: string[] = [];
    for (let i = 0; i < 5; i++) made.push((await create({ tenant: 'paged', scopes: ['exec'], name: `t${i}` })).body.data.id);
    const seen: string[] = [];
    let pageToken: string | undefined;
    do {
      const r = await h.call('GET', `/v1/tokens?tenant=paged&limit=2${pageToken === undefined ? '' : `&page_token=${pageToken}`}`);
      assert.equal(r.status, 200);
      assert.ok(r.body.data.length <= 2);
      for (const t of r.body.data) {
        assert.deepEqual(Object.keys(t).sort(), ['created_at', 'id', 'name', 'revoked_at', 'scopes', 'tenant']);
        seen.push(t.id);
      }
      pageToken = r.body.next_page_token;
    } while (pageToken !== undefined);
    assert.deepEqual(seen, [...made].reverse());
    const all = await h.call('GET', '/v1/tokens?limit=1000');
    const ids = all.body.data.map((t: { id: string }) => t.id);
    assert.ok(ids.includes(ADMIN_TOKEN_ID) && made.every((id) => ids.includes(id)));
    assert.ok(!JSON.stringify(all.body).includes('hash'));
  });

  test('bad list queries are invalid_argument', async () => {
    for (const q of ['limit=0', 'limit=1001', 'limit=x', 'page_token=!!', 'page_token=czo5OTk5OTk5OTk5OTk5OTk5OTk5', 'tenant=']) {
      const r = await h.call('GET', `/v1/tokens?${q}`);
      assert.equal(r.status, 400, q);
      assert.equal(r.body.error.code, 'invalid_argument', q);
    }
  });

  test('get: an unknown id, or not an id at all, is not_found; a token value pasted as the id is not echoed', async () => {
    const value = (await create({ tenant: 'acme', scopes: ['exec'] })).body.data.token as string;
    for (const id of [randomUUID(), 'not-a-uuid', 'acme', value]) {
      const r = await h.call('GET', `/v1/tokens/${id}`);
      assert.equal(r.status, 404, id);
      assert.equal(r.body.error.code, 'not_found');
      assert.ok(!JSON.stringify(r.body).includes(value));
    }
    assert.equal(maskTokens(`/v1/tokens/${value}?x=1`), '/v1/tokens/vsl_[redacted]?x=1');
  });
});

describe('revoke', () => {
  test('a revoked token is refused at once, though it was just admitted (and cached)', async () => {
    const { id, token } = (await create({ tenant: 'acme', scopes: ['runtimes:read'] })).body.data;
    assert.equal((await h.call('GET', '/v1/runtimes', undefined, token)).status, 200);
    const r = await h.call('DELETE', `/v1/tokens/${id}`);
    assert.equal(r.status, 200);
    assert.equal(r.body.data.id, id);
    assert.ok(!Number.isNaN(Date.parse(r.body.data.revoked_at)));
    const after = await h.call('GET', '/v1/runtimes', undefined, token);
    assert.equal(after.status, 401);
    assert.equal(after.body.error.code, 'unauthenticated');
    // Again: nothing changes, the first revocation's time stays.
    const again = await h.call('DELETE', `/v1/tokens/${id}`);
    assert.equal(again.status, 200);
    assert.equal(again.body.data.revoked_at, r.body.data.revoked_at);
    assert.equal((await h.call('GET', `/v1/tokens/${id}`)).body.data.revoked_at, r.body.data.revoked_at);
  });

  test('a revocation survives a restart', async () => {
    const dir = (await import('node:fs')).mkdtempSync(`${(await import('node:os')).tmpdir()}/vessel-tokens-`);
    const first = await apiHarness({ dir });
    const { id, token } = (await first.call('POST', '/v1/tokens', { tenant: 'acme', scopes: ['exec'] })).body.data;
    await first.call('DELETE', `/v1/tokens/${id}`);
    await first.close();
    const second = await apiHarness({ dir });
    try {
      assert.equal((await second.call('GET', '/v1/runtimes', undefined, token)).status, 401);
      assert.notEqual((await second.call('GET', `/v1/tokens/${id}`)).body.data.revoked_at, null);
    } finally {
      await second.close();
      (await import('node:fs')).rmSync(dir, { recursive: true, force: true });
    }
  });

  test('the bootstrap admin token cannot be revoked through the API, by any admin', async () => {
    const other = (await create({ tenant: 'ops', scopes: ['admin'] })).body.data.token;
    for (const caller of [h.admin, other]) {
      const r = await h.call('DELETE', `/v1/tokens/${ADMIN_TOKEN_ID}`, undefined, caller);
      assert.equal(r.status, 409);
      assert.equal(r.body.error.code, 'failed_precondition');
    }
    assert.equal((await h.call('GET', '/v1/tokens')).status, 200);
  });

  test('a token cannot revoke itself; another admin can', async () => {
    const { id, token } = (await create({ tenant: 'ops', scopes: ['admin'] })).body.data;
    const self = await h.call('DELETE', `/v1/tokens/${id}`, undefined, token);
    assert.equal(self.status, 409);
    assert.equal(self.body.error.code, 'failed_precondition');
    assert.equal((await h.call('GET', '/v1/tokens', undefined, token)).status, 200);
    assert.equal((await h.call('DELETE', `/v1/tokens/${id}`)).status, 200);
    assert.equal((await h.call('GET', '/v1/tokens', undefined, token)).status, 401);
  });

  test('an unknown id is not_found', async () => {
    for (const id of [randomUUID(), 'nope']) {
      const r = await h.call('DELETE', `/v1/tokens/${id}`);
      assert.equal(r.status, 404);
      assert.equal(r.body.error.code, 'not_found');
    }
  });
});

test("a created token's value is in its creation reply and in no other response or log line", async () => {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  const logger = pino(serviceLogOptions('debug'), sink) as unknown as FastifyBaseLogger;
  const logged = await apiHarness({ logger });
  try {
    const replies: string[] = [];
    const call = async (method: 'GET' | 'POST' | 'DELETE', url: string, body?: unknown, token?: string | null) => {
      const r = await logged.call(method, url, body, token);
      replies.push(JSON.stringify(r.body) + JSON.stringify(r.headers));
      return r;
    };
    const created = await logged.call('POST', '/v1/tokens', { tenant: 'acme', scopes: ['runtimes:read', 'runtimes:write'], name: 'secretive' });
    const { id, token } = created.body.data;
    assert.match(token, TOKEN_VALUE);
    // Every way the value could come back: lists, gets, its own use, errors made with it, and its revocation.
    await call('GET', '/v1/tokens');
    await call('GET', `/v1/tokens?tenant=acme`);
    await call('GET', `/v1/tokens/${id}`);
    await call('GET', `/v1/tokens/${token}`);
    await call('DELETE', `/v1/tokens/${token}`);
    await call('POST', '/v1/runtimes', { display_name: 'rt' }, token);
    await call('GET', '/v1/runtimes', undefined, token);
    await call('GET', '/v1/secrets', undefined, token);
    await call('POST', '/v1/tokens', { tenant: 'acme', scopes: [token] });
    await call('POST', '/v1/tokens', { tenant: 'acme', scopes: ['exec'], name: token.replace('_', '') + '/' });
    await call('GET', '/v1/audits');
    await call('DELETE', `/v1/tokens/${id}`);
    await call('GET', '/v1/runtimes', undefined, token);
    await call('GET', `/v1/tokens/${id}`);
    for (const reply of replies) assert.ok(!reply.includes(token), reply);
    // The log saw these requests, the creation included, and never the value.
    assert.ok(lines.some((l) => l.includes('"token created"') && l.includes(id)));
    assert.ok(lines.some((l) => l.includes('"token revoked"') && l.includes(id)));
    assert.ok(lines.filter((l) => l.includes('request completed')).length >= replies.length);
    for (const line of lines) assert.ok(!line.includes(token), line);
  } finally {
    await logged.close();
  }
});
