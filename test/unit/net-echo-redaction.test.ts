/**
 * Secrets never reach the guest through an upstream that echoes its request: through the real
 * egress proxy, intercepting TLS, to a real TLS echo upstream on loopback. The injected value
 * comes back in the body in one piece and cut between two chunks at every offset, plain,
 * percent-encoded and base64-encoded, and the guest never sees it; the guest's Accept-Encoding is
 * replaced by identity, an upstream that compresses anyway is refused, and an upstream that keeps
 * a secret from one request and answers it to another is redacted too.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Agent, request } from 'node:https';
import type { Server } from 'node:https';
import { EgressHarness } from '../support/egress-harness.js';
import { ENCODINGS, echoUpstream, type Encoding } from '../support/echo-upstream.js';

const h = new EgressHarness();
const SECRET = 'sk/t+st&key=1 "q"%Zx9';
let echo: { server: Server; port: number; acceptEncodings: string[] };

before(async () => {
  await h.start();
  echo = await echoUpstream(h.up.dir);
  h.destination = { address: '127.0.0.1', port: echo.port };
});
after(() => {
  echo.server.closeAllConnections();
  echo.server.close();
  return h.close();
});

/** A keep-alive TLS client of the guest at `identity`, trusting the gateway's CA, one connection. */
const guestTls = (identity: string) => new Agent({ keepAlive: true, maxSockets: 1, localAddress: identity, ca: h.ca.certPem, servername: 'api.test' } as ConstructorParameters<typeof Agent>[0]);

function get(agent: Agent, path: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: Record<string, unknown>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port: h.proxyPort, path, agent, headers: { host: `api.test:${echo.port}`, ...headers } }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks).toString('latin1') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/** What the guest can read back out of a body: masked bytes read as the encoding's zero. */
const DECODE: Record<Encoding, (s: string) => string> = {
  plain: (s) => s,
  percent: (s) => decodeURIComponent(s),
  base64: (s) => Buffer.from(s.replace(/\*/g, 'A'), 'base64').toString('latin1'),
};

/** No four consecutive characters of the secret (so no part of it worth the name) are in `text`. */
function assertNoSecret(text: string, what: string): void {
  for (let i = 0; i + 4 <= SECRET.length; i++) assert.ok(!text.includes(SECRET.slice(i, i + 4)), `${what}: ${JSON.stringify(SECRET.slice(i, i + 4))} in ${JSON.stringify(text)}`);
}

test('an echoed secret is masked in the body, in one chunk or cut at every offset, plain, percent- and base64-encoded', async () => {
  const net = h.runtime('rt-echo', '127.0.0.50', ['api.test'], [h.rule('r-echo', SECRET, { headerName: 'X-Api-Key' })]);
  const guest = guestTls(net.identity);
  for (const enc of Object.keys(ENCODINGS) as Encoding[]) {
    const spelled = ENCODINGS[enc](SECRET).length;
    for (const at of [null, ...Array.from({ length: spelled + 1 }, (_, i) => i)]) {
      const r = await get(guest, `/echo?enc=${enc}${at === null ? '' : `&at=${at}`}`);
      assert.equal(r.status, 200);
      const what = `${enc} ${at === null ? 'whole' : `cut at ${at}`}`;
      assertNoSecret(DECODE[enc](r.body), what);
      assert.ok(DECODE[enc](r.body).includes('X-Api-Key: '), `${what}: the rest of the echo is there`);
      if (at === null) assert.equal(Number(r.headers['content-length']), Buffer.byteLength(r.body, 'latin1'), `${what}: Content-Length still true`);
    }
  }
  guest.destroy();
});

test('a guest asking for gzip gets identity; an upstream that compresses anyway is refused with a 502', async () => {
  const net = h.runtime('rt-echo-gzip', '127.0.0.51', ['api.test'], [h.rule('r-echo-gzip', SECRET, { headerName: 'X-Api-Key' })]);
  const guest = guestTls(net.identity);
  const before = echo.acceptEncodings.length;
  const r = await get(guest, '/echo?enc=plain', { 'accept-encoding': 'gzip, deflate, br' });
  assert.equal(r.status, 200);
  assert.equal(r.headers['content-encoding'], undefined, 'an identity body');
  assert.deepEqual(echo.acceptEncodings.slice(before), ['identity'], 'the Accept-Encoding was replaced on the way up');
  assertNoSecret(r.body, 'identity body');
  const refused = await get(guestTls(net.identity), '/gzip-anyway', { 'accept-encoding': 'gzip' });
  assert.equal(refused.status, 502);
  assert.match(refused.body, /encoded body/);
  assertNoSecret(refused.body, 'refusal');
  const audit = h.audits.find((a) => a.runtimeId === net.id && a.detail.path === '/gzip-anyway');
  assert.equal(audit?.detail.reason, 'upstream_error: encoded_response');
  guest.destroy();
});

test('a secret an upstream kept from one request is masked in its answer to another the rule did not inject', async () => {
  const rule = { ...h.rule('r-echo-store', SECRET, { headerName: 'X-Api-Key' }), pathPattern: '/store' };
  const net = h.runtime('rt-echo-store', '127.0.0.52', ['api.test'], [rule]);
  const guest = guestTls(net.identity);
  assert.equal((await get(guest, '/store')).status, 200);
  const last = await get(guest, '/last');
  assert.equal(last.status, 200);
  assert.match(last.body, /^last key: \*+\n$/, 'the request itself carried nothing; its answer is still masked');
  guest.destroy();
});
