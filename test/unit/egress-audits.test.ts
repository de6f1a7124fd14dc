/**
 * Audit batching when the store refuses a write (a full disk, a lock held too long): the batch is
 * kept for the next one, a flush never rejects, and what is held stays bounded.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { AuditService } from '../../src/core/audits.js';
import { EgressService, MAX_AUDIT_FIELD_CHARS } from '../../src/core/egress.js';
import type { Audit } from '../../src/core/types.js';

function service(record: (batch: Audit[]) => Promise<void>) {
  const errors: object[] = [];
  const audits = { record, prune: async () => {} } as unknown as AuditService;
  const log = { info() {}, warn() {}, error: (o: object) => void errors.push(o) };
  const egress = new EgressService(undefined as never, undefined as never, undefined as never, audits, () => {}, log);
  return { egress, errors };
}

const denied = (n: number) => ({ action: 'deny', host: `h${n}.example`, ip: null, port: 443, reason: 'host_not_allowed' }) as const;

test('a refused batch is kept and written with the next one; later flushes still run', async () => {
  const written: string[] = [];
  let refuse = true;
  const { egress, errors } = service(async (batch) => {
    if (refuse) throw new Error('SQLITE_FULL: database or disk is full');
    written.push(...batch.map((a) => (a.payload as any).egress.tcp_connection.host));
  });
  egress.audit('rt', 'tenant', 'tcp_connection', denied(1));
  await egress.flush(); // must not reject
  assert.equal(errors.length, 1);
  refuse = false;
  egress.audit('rt', 'tenant', 'tcp_connection', denied(2));
  await egress.flush();
  assert.deepEqual(written, ['h1.example', 'h2.example']);
});

test('while the store refuses, what is held stays bounded and the oldest go first', async () => {
  const { egress, errors } = service(async () => {
    throw new Error('SQLITE_BUSY');
  });
  for (let i = 0; i < 60_000; i++) egress.audit('rt', 'tenant', 'tcp_connection', denied(i));
  await egress.flush();
  assert.deepEqual(errors.map((e: any) => [e.held, e.dropped]), [[50_000, 10_000]]);
});

test('an audit keeps at most MAX_AUDIT_FIELD_CHARS of each text field, and says which it cut', async () => {
  const written: Audit[] = [];
  const { egress } = service(async (batch) => void written.push(...batch));
  egress.audit('rt', 'tenant', 'tcp_connection', { action: 'deny', host: 'x'.repeat(16_000), ip: null, port: 443, reason: 'no_host' });
  egress.audit('rt', 'tenant', 'tcp_connection', { action: 'allow', host: 'api.example', ip: '192.0.2.1', port: 443, reason: 'host_allowed' });
  await egress.flush();
  const [long, short] = written.map((a) => (a.payload as any).egress.tcp_connection);
  assert.equal(long.host.length, MAX_AUDIT_FIELD_CHARS);
  assert.deepEqual(long.truncated, ['host']);
  assert.equal(long.reason, 'no_host');
  assert.deepEqual(short, { action: 'allow', host: 'api.example', ip: '192.0.2.1', port: 443, reason: 'host_allowed' });
});

test('a stored text field has no control byte; escapes are never cut in half, and count against the cap', async () => {
  const written: Audit[] = [];
  const { egress } = service(async (batch) => void written.push(...batch));
  const host = 'a' + '\x1b'.repeat(2000);
  egress.audit('rt', 'tenant', 'http_request', { action: 'deny', host, ip: null, port: 80, reason: 'no_host', status: 403, method: 'GET', path: '/p\x07\\', rule_ids: [] });
  await egress.flush();
  const d = (written[0]!.payload as any).egress.http_request;
  assert.doesNotMatch(JSON.stringify(d).replace(/\\\\/g, ''), /\\u00[01]|\\u007f|[\x00-\x1f\x7f-\x9f]/);
  assert.equal(d.host, 'a' + '\\x1b'.repeat(255), 'whole escapes only, within the cap');
  assert.ok(d.host.length <= MAX_AUDIT_FIELD_CHARS);
  assert.equal(d.path, '/p\\x07\\\\');
  assert.deepEqual(d.truncated, ['host']);
});
