/**
 * Guest bytes never reach an operator's terminal as commands: every audit field fed from what a
 * guest sent (an SNI that is no host name, a Host header with C1 bytes) is stored escaped, through
 * the real egress proxy and the core's audit batching, with no control byte (C0, DEL, C1) left.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import type { AuditService } from '../../src/core/audits.js';
import { EgressService } from '../../src/core/egress.js';
import type { Audit } from '../../src/core/types.js';
import { EgressHarness } from '../support/egress-harness.js';
import { clientHello } from '../support/tls-hello.js';

const h = new EgressHarness();
const stored: Audit[] = [];
const egress = new EgressService(undefined as never, undefined as never, undefined as never, { record: async (batch: Audit[]) => void stored.push(...batch), prune: async () => 0 } as unknown as AuditService, () => {}, { info() {}, warn() {}, error() {} });
let HTTP = 0;

before(async () => {
  await h.start();
  HTTP = h.up.port(h.up.http);
  h.destination = { address: '127.0.0.1', port: HTTP };
  h.auditSink = (a) => egress.audit(a.runtimeId, 'tenant-a', a.kind, a.detail);
});
after(() => h.close());

/** Writes `bytes` as the guest at `identity`; resolves with what came back (latin1) once the proxy closes. */
function exchange(identity: string, bytes: Buffer): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const s = connect({ host: '127.0.0.1', port: h.proxyPort, localAddress: identity });
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    s.on('error', () => undefined);
    s.on('close', () => resolve(got));
    s.write(bytes);
  });
}

/** Any C0 byte, DEL or C1 byte. */
const CONTROL = /[\x00-\x1f\x7f-\x9f]/;

/** An OSC 52 clipboard write, then a line erase: what a hostile SNI would make a terminal do. */
const EVIL = '\x1b]52;c;cm0gLXJmIH4K\x07\x1b[2Kapi.test';

test('an SNI with escape sequences and a Host with C1 bytes are stored escaped, with no control byte', async () => {
  const net = h.runtime('rt-audit-text', '127.0.0.40', ['api.test']);
  // Node's own ClientHello for a name of the same length, with the name's bytes replaced.
  const placeholder = 'z'.repeat(EVIL.length);
  const hello = await clientHello(placeholder);
  const at = hello.indexOf(placeholder, 0, 'latin1');
  assert.ok(at > 0);
  Buffer.from(EVIL, 'latin1').copy(hello, at);
  h.destination = { address: '127.0.0.1', port: h.up.port(h.up.https) };
  await exchange(net.identity, hello);
  h.destination = { address: '127.0.0.1', port: HTTP };
  // Node's parser refuses C0 bytes in a header value but passes C1 (obs-text): CSI 2K, NEL.
  const answer = await exchange(net.identity, Buffer.from(`GET /audit-text HTTP/1.1\r\nHost: api.test\x9b2K\x85\\x9b\r\nConnection: close\r\n\r\n`, 'latin1'));
  assert.match(answer, /^HTTP\/1\.1 403 /);
  await egress.flush();
  const mine = stored.filter((a) => a.runtimeId === net.id).map((a) => (a.payload as any).egress[(a.payload as any).egress.kind]);
  const sni = mine.find((d) => d.reason === 'no_host' && d.port === h.up.port(h.up.https));
  const host = mine.find((d) => d.path === '/audit-text');
  assert.ok(sni !== undefined && host !== undefined, JSON.stringify(mine));
  for (const audit of mine) for (const value of Object.values(audit)) if (typeof value === 'string') assert.doesNotMatch(value, CONTROL, JSON.stringify(value));
  assert.equal(sni.host, '\\x1b]52;c;cm0gLXJmIH4K\\x07\\x1b[2Kapi.test', 'escaped visibly');
  // A backslash the guest sent is doubled, so `\x9b` in the text is never mistaken for the byte.
  assert.equal(host.host, 'api.test\\x9b2K\\x85\\\\x9b');
});
