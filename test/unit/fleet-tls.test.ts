/**
 * Enrollment and TLS on the hop (src/cluster/enrollment.ts, fleet-tls.ts; issue 26 §4): an enrolled
 * host serves the hop over TLS alone, with a certificate for its name issued from the fleet's hop
 * CA for a key pair derived from its own key; an API node reaches it only with a certificate of
 * the same CA, and only if the peer proves that host's name; a plain HTTP hop to an enrolled host
 * is refused by the API node and finds no one to talk to on the host.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request as httpRequest, type Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { apiHopClient, enrollHost, hostCredential } from '../../src/cluster/enrollment.js';
import { hostKey } from '../../src/cluster/fleet-keys.js';
import { hostServerOptions, listenTls } from '../../src/cluster/fleet-tls.js';
import { callHop, type HopClient } from '../../src/cluster/hop-proxy.js';
import { signHop, verifyHop } from '../../src/cluster/hop.js';
import { NO_BODY } from '../../src/cluster/hop-body.js';
import { SecretBox } from '../../src/core/secret-box.js';
import type { Principal } from '../../src/core/types.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';

const SECRET = randomBytes(32).toString('hex');
const box = new SecretBox(randomBytes(32));
const principal: Principal = { tokenId: 't', tenantId: 'acme', scopes: new Set(['runtimes:write']) };

let dir: string;
let store: SqliteStore;
let nodeKey: string;
let hostServer: Server;
let stopTls: () => Promise<void>;
let tlsPort = 0;
let client: HopClient & { close(): void };
let seq = 0;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vessel-fleet-tls-'));
  store = new SqliteStore(join(dir, 'vessel.db'));
  ({ nodeKey } = await enrollHost(store.nodes, SECRET, box, 'host-1'));
  const credential = await hostCredential(store.nodes, 'host-1', nodeKey);
  // A VM host's hop port, as serve.ts starts it: its own key checks every hop.
  hostServer = createServer((req, res) => {
    if (req.url === '/healthz') return void res.end('ok');
    const hop = verifyHop(nodeKey, req.headers, { method: req.method!, url: req.url!, requestId: String(req.headers['x-request-id']), node: 'host-1' });
    res.writeHead(typeof hop === 'string' ? 401 : 200, { 'content-type': 'application/json' }).end(JSON.stringify(typeof hop === 'string' ? { error: { code: 'unauthenticated', message: hop } } : { data: 'served' }));
  });
  tlsPort = await freePort();
  stopTls = await listenTls(hostServer, hostServerOptions(credential.tls), '127.0.0.1', tlsPort);
  client = await apiHopClient(store.nodes, SECRET, box);
});

after(async () => {
  client.close();
  await stopTls();
  hostServer.closeAllConnections();
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

async function freePort(): Promise<number> {
  const s = createServer().listen(0, '127.0.0.1');
  await once(s, 'listening');
  const { port } = s.address() as AddressInfo;
  await new Promise((r) => s.close(r));
  return port;
}

const call = (name: string, internalUrl: string) => callHop(client, { name, internalUrl }, { principal, requestId: `tls-${++seq}`, method: 'GET', path: '/internal/checkpoints/x/description' }, 5000);

async function bodyOf(answer: AsyncIterable<Buffer>): Promise<string> {
  let text = '';
  for await (const part of answer) text += part.toString();
  return text;
}

test("enrollment: the host's key opens its enrollment; another key, or a host never enrolled, is refused at start", async () => {
  assert.equal(nodeKey, hostKey(SECRET, 'host-1'), 'the key printed is the one API nodes derive');
  await assert.rejects(hostCredential(store.nodes, 'host-1', hostKey(SECRET, 'host-2')), /not the key VM host 'host-1' was enrolled with/);
  await assert.rejects(hostCredential(store.nodes, 'host-9', hostKey(SECRET, 'host-9')), /not enrolled/);
  const stored = (await store.nodes.credential('host-1'))!;
  assert.ok(!stored.includes(nodeKey), "the store holds nothing of the host's key");
  assert.ok(!stored.includes('PRIVATE KEY'), 'nor any private key in the clear');
});

test('an API node reaches the enrolled host over TLS with its fleet certificate', async () => {
  assert.equal(await bodyOf(await call('host-1', `https://127.0.0.1:${tlsPort}`)), '{"data":"served"}');
});

test("a peer that cannot prove the host's name is refused: a row pointing host-2's name at host-1's address reaches nobody", async () => {
  // host-2 is enrolled too: its name is known, its key is not host-1's.
  await enrollHost(store.nodes, SECRET, box, 'host-2');
  await assert.rejects(call('host-2', `https://127.0.0.1:${tlsPort}`), /not VM host 'host-2'/);
});

test('a plain HTTP hop to an enrolled host is refused by the API node, and finds no HTTP server on the host', async () => {
  await assert.rejects(call('host-1', `http://127.0.0.1:${tlsPort}`), /enrolled for TLS/);
  // Sent anyway (what a client that ignores the enrollment would do): no HTTP answer comes back.
  const got = await new Promise<string>((resolve) => {
    const out = httpRequest({ host: '127.0.0.1', port: tlsPort, path: '/healthz' }, (res) => resolve(`answered ${res.statusCode}`));
    out.once('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
    out.end();
  });
  assert.match(got, /ECONNRESET|EPIPE|socket hang up/);
});

test('a TLS peer without a certificate of the fleet CA gets the probes and nothing else: not even a correctly signed hop', async () => {
  const get = (path: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; body: string }>((resolve, reject) => {
      const out = httpsRequest({ host: '127.0.0.1', port: tlsPort, path, headers, rejectUnauthorized: false }, (res) => {
        let body = '';
        res.on('data', (d) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
      });
      out.once('error', reject);
      out.end();
    });
  assert.deepEqual(await get('/healthz'), { status: 200, body: 'ok' }, "the kubelet's probe presents no certificate");
  // What a host's key signs, sent by someone who holds the key but no certificate of the fleet.
  const path = '/internal/checkpoints/x/description';
  const signed = signHop(nodeKey, principal, { method: 'GET', url: path, requestId: 'no-cert', node: 'host-1', body: NO_BODY });
  const refused = await get(path, { ...signed, 'x-request-id': 'no-cert' });
  assert.equal(refused.status, 401);
  assert.match(refused.body, /certificate of the fleet/);
});

test('a host not enrolled is still reached over plain HTTP (a fleet on its way to TLS)', async () => {
  const plain = createServer((req, res) => {
    const hop = verifyHop(hostKey(SECRET, 'host-3'), req.headers, { method: req.method!, url: req.url!, requestId: String(req.headers['x-request-id']), node: 'host-3' });
    res.writeHead(typeof hop === 'string' ? 401 : 200).end(typeof hop === 'string' ? hop : 'plain');
  });
  plain.listen(0, '127.0.0.1');
  await once(plain, 'listening');
  try {
    assert.equal(await bodyOf(await call('host-3', `http://127.0.0.1:${(plain.address() as AddressInfo).port}`)), 'plain');
  } finally {
    plain.closeAllConnections();
    plain.close();
  }
});
