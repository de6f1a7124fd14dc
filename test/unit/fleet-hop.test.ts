/** The API node → VM host hop's signature (src/cluster/hop.ts): what it covers, and what it refuses. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { HOP_PRINCIPAL, HOP_SIGNATURE, HOP_TIME, SeenHops, signHop, verifyHop } from '../../src/cluster/hop.js';
import type { Principal } from '../../src/core/types.js';

const SECRET = 'a'.repeat(48);
const principal: Principal = { tokenId: 'tok-1', tenantId: 'acme', scopes: new Set(['runtimes:read', 'exec']) };
const req = { method: 'POST', url: '/v1/runtimes/web/exec?x=1', requestId: 'abc-1', node: 'host-1' };
const NOW = 1_800_000_000_000;

test('a signed hop gives back the principal it vouches for', () => {
  const headers = signHop(SECRET, principal, req, NOW);
  const got = verifyHop(SECRET, headers, req, NOW + 1000);
  assert.ok(typeof got !== 'string', JSON.stringify(got));
  assert.equal(got.tokenId, 'tok-1');
  assert.equal(got.tenantId, 'acme');
  assert.deepEqual([...got.scopes].sort(), ['exec', 'runtimes:read']);
});

test('every covered part, changed, is refused', () => {
  const headers = signHop(SECRET, principal, req, NOW);
  const refused = (h: Record<string, string>, r = req, now = NOW) => assert.equal(typeof verifyHop(SECRET, h, r, now), 'string');
  refused(headers, { ...req, method: 'DELETE' });
  refused(headers, { ...req, url: '/v1/runtimes/other/exec?x=1' });
  refused(headers, { ...req, url: '/v1/runtimes/web/exec?x=2' });
  refused(headers, { ...req, requestId: 'abc-2' });
  refused(headers, { ...req, node: 'host-2' });
  const admin = Buffer.from(JSON.stringify({ token_id: 'tok-1', tenant_id: 'acme', scopes: ['admin'] })).toString('base64url');
  refused({ ...headers, [HOP_PRINCIPAL]: admin });
  refused({ ...headers, [HOP_TIME]: String(NOW + 1) });
  refused(headers, req, NOW + 61_000);
  refused(headers, req, NOW - 61_000);
  assert.equal(typeof verifyHop('b'.repeat(48), headers, req, NOW), 'string', 'another cluster’s secret');
});

test('missing, malformed and oversized headers are refused without throwing', () => {
  const headers = signHop(SECRET, principal, req, NOW);
  for (const drop of [HOP_PRINCIPAL, HOP_TIME, HOP_SIGNATURE]) {
    const h: Record<string, string> = { ...headers };
    delete h[drop];
    assert.equal(typeof verifyHop(SECRET, h, req, NOW), 'string');
  }
  const bad: Array<Record<string, string | string[]>> = [
    { ...headers, [HOP_TIME]: 'soon' },
    { ...headers, [HOP_TIME]: '9'.repeat(40) },
    { ...headers, [HOP_SIGNATURE]: '' },
    { ...headers, [HOP_SIGNATURE]: '%%%' },
    { ...headers, [HOP_PRINCIPAL]: 'x'.repeat(5000) },
    { ...headers, [HOP_PRINCIPAL]: [headers[HOP_PRINCIPAL]!, headers[HOP_PRINCIPAL]!] },
  ];
  for (const h of bad) assert.equal(typeof verifyHop(SECRET, h, req, NOW), 'string');
});

test('a principal with a scope this version does not know is refused, even correctly signed', () => {
  const forged = Buffer.from(JSON.stringify({ token_id: 't', tenant_id: 'acme', scopes: ['root'] })).toString('base64url');
  const headers = signHop(SECRET, principal, req, NOW);
  // Re-sign the odd principal with the right secret: the MAC holds, the content does not.
  const sig = createHmac('sha256', SECRET).update(['vessel-hop-v1', String(NOW), 'POST', req.url, forged, req.requestId, req.node].join('\n')).digest().toString('base64url');
  assert.equal(verifyHop(SECRET, { ...headers, [HOP_PRINCIPAL]: forged, [HOP_SIGNATURE]: sig }, req, NOW), 'malformed hop principal');
});

test('a hop is good once: the same signed headers again are refused, and the memory of them is kept a window long', () => {
  const seen = new SeenHops();
  const headers = signHop(SECRET, principal, req, NOW);
  assert.ok(typeof verifyHop(SECRET, headers, req, NOW, seen) !== 'string');
  assert.equal(verifyHop(SECRET, headers, req, NOW + 10, seen), 'this hop was already used');
  // Another request (a new id) is its own hop.
  const next = { ...req, requestId: 'abc-9' };
  assert.ok(typeof verifyHop(SECRET, signHop(SECRET, principal, next, NOW), next, NOW, seen) !== 'string');
  // A refused MAC is not remembered: it cannot crowd out real ones.
  const forged = { ...headers, [HOP_SIGNATURE]: Buffer.alloc(32).toString('base64url') };
  assert.equal(verifyHop(SECRET, forged, req, NOW, seen), 'the hop signature does not match');
  assert.equal(seen.firstTime(forged[HOP_SIGNATURE]!, NOW), true);
});
