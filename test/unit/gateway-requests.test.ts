/**
 * What the gateway's process may ask of the service (src/net/gateway-requests.ts): a taken-over
 * listener process gets no secret, audit or answer that is not for a runtime it serves.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { GatewayHooks } from '../../src/core/ports.js';
import type { Attachment } from '../../src/net/gateway-listeners.js';
import { MAX_AUDIT_BATCH, checkedAuditBatch, checkedListenerCall } from '../../src/net/gateway-requests.js';

const rule = (secretId: string) => ({ id: `r-${secretId}`, tenantId: 'acme', runtimeId: 'rt-1', secretId, hostPattern: 'api.test', pathPattern: '/*', injection: { type: 'header' as const, name: 'x-key', template: '{value}' }, createdAt: '' });
const attached = new Map<string, Attachment>([
  ['rt-1', { subject: { runtimeId: 'rt-1', tenantId: 'acme', policy: { enabled: true, allowed_hosts: ['api.test'] }, rules: [rule('sec-1')] as never }, tap: 'vsl1', identity: '10.0.0.1' }],
]);

function context() {
  const seen: string[] = [];
  const hooks: GatewayHooks = {
    revealSecret: async (tenantId, secretId) => (seen.push(`reveal ${tenantId} ${secretId}`), { value: 'v', cacheTtlSecs: 1 }),
    audit: (runtimeId, tenantId, kind) => void seen.push(`audit ${runtimeId} ${tenantId} ${kind}`),
    activity: (runtimeId) => void seen.push(`activity ${runtimeId}`),
    ingressTarget: async () => null,
  };
  return { seen, ctx: { attached, hooks, dnsOverride: (name: string) => (name === 'api.test' ? ['127.0.0.1'] : undefined) } };
}

test('a secret is revealed only for a rule of a runtime the gateway serves, as its tenant', async () => {
  const { seen, ctx } = context();
  assert.deepEqual(await checkedListenerCall('revealSecret', { tenantId: 'acme', secretId: 'sec-1' }, ctx), { value: 'v', cacheTtlSecs: 1 });
  assert.throws(() => checkedListenerCall('revealSecret', { tenantId: 'acme', secretId: 'sec-other' }, ctx), /no rule/);
  assert.throws(() => checkedListenerCall('revealSecret', { tenantId: 'globex', secretId: 'sec-1' }, ctx), /no rule/, "another tenant's name for the same secret id");
  assert.throws(() => checkedListenerCall('revealSecret', { tenantId: 'acme', secretId: 'x'.repeat(300) }, ctx), /short string/);
  assert.deepEqual(seen, ['reveal acme sec-1']);
});

test("audits and activity only for a served runtime, as its own tenant's, of a known kind and size", () => {
  const { seen, ctx } = context();
  checkedListenerCall('audit', { runtimeId: 'rt-1', tenantId: 'acme', kind: 'tcp_connection', detail: { action: 'deny' } }, ctx);
  assert.throws(() => checkedListenerCall('audit', { runtimeId: 'rt-1', tenantId: 'globex', kind: 'tcp_connection', detail: {} }, ctx), /own tenant/);
  assert.throws(() => checkedListenerCall('audit', { runtimeId: 'rt-2', tenantId: 'acme', kind: 'tcp_connection', detail: {} }, ctx), /serves no such runtime/);
  assert.throws(() => checkedListenerCall('audit', { runtimeId: 'rt-1', tenantId: 'acme', kind: 'token_created', detail: {} }, ctx), /kind/);
  assert.throws(() => checkedListenerCall('audit', { runtimeId: 'rt-1', tenantId: 'acme', kind: 'http_request', detail: { path: 'x'.repeat(70_000) } }, ctx), /too large/);
  assert.throws(() => checkedListenerCall('activity', { runtimeId: 'rt-9' }, ctx), /serves no such runtime/);
  assert.throws(() => checkedListenerCall('activity', 'rt-1', ctx), /object/);
  checkedListenerCall('activity', { runtimeId: 'rt-1' }, ctx);
  assert.deepEqual(seen, ['audit rt-1 acme tcp_connection', 'activity rt-1']);
});

test('ingress targets take a TCP port, DNS overrides a name', async () => {
  const { ctx } = context();
  assert.equal(await checkedListenerCall('ingressTarget', { runtimeId: 'rt-1', port: 8000 }, ctx), null);
  for (const port of [0, 70_000, 1.5, '80']) assert.throws(() => checkedListenerCall('ingressTarget', { runtimeId: 'rt-1', port }, ctx), /TCP port/);
  assert.deepEqual(checkedListenerCall('dnsOverride', { name: 'api.test' }, ctx), ['127.0.0.1']);
  assert.equal(checkedListenerCall('dnsOverride', { name: 'other.test' }, ctx), null);
});

test('a batch of audits records each one that passes the audit check and drops the others; a batch is an array of bounded length', () => {
  const { seen, ctx } = context();
  const good = { runtimeId: 'rt-1', tenantId: 'acme', kind: 'http_request', detail: { action: 'allow' } };
  const refused = checkedAuditBatch([good, { ...good, tenantId: 'globex' }, { ...good, runtimeId: 'rt-2' }, 'not an object', { ...good, kind: 'tcp_connection' }], ctx);
  assert.equal(refused, 3);
  assert.deepEqual(seen, ['audit rt-1 acme http_request', 'audit rt-1 acme tcp_connection']);
  assert.throws(() => checkedAuditBatch({ 0: good }, ctx), /array/);
  assert.throws(() => checkedAuditBatch(Array.from({ length: MAX_AUDIT_BATCH + 1 }, () => good), ctx), /at most/);
  assert.equal(seen.length, 2, 'nothing of a refused batch was recorded');
});
