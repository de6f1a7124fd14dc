/**
 * The hop on the wire (issue 26): a real API node's hop (hop-proxy.ts) in front of a real VM host's
 * API (buildApi with `vmHostRole`). What an API node sent is captured as it left, then sent to the host
 * again, or changed on its way: a used hop is refused under every text of its signature, and a
 * body other than the one signed, whole or framed, is refused before anything acts on it.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { buildApi } from '../../src/api/app.js';
import { forwardRequest } from '../../src/cluster/hop-proxy.js';
import { vmHostRole } from '../../src/cluster/vm-host-api.js';
import { hostKey } from '../../src/cluster/fleet-keys.js';
import { plainHopClient } from '../support/hop-client.js';
import { Core } from '../../src/core/core.js';
import { SecretBox } from '../../src/core/secret-box.js';
import { ADMIN_TOKEN_ID, DEFAULT_TENANT } from '../../src/core/tokens.js';
import type { Principal } from '../../src/core/types.js';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { ROOMY_TENANT_LIMITS, silentLog } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { FakeGateway } from '../support/fake-gateway.js';

const SECRET = 's'.repeat(40);
const NODE = 'host-1';
const SIGNATURE = 'x-vessel-hop-signature';
const principal: Principal = { tokenId: ADMIN_TOKEN_ID, tenantId: DEFAULT_TENANT, scopes: new Set(['admin']) };

let dir: string;
let store: SqliteStore;
let core: Core;
let driver: FakeDriver;
let host: FastifyInstance;
let hostPort = 0;
/** What reached the recorder: the hop exactly as the API node sent it. */
let captured: Captured[] = [];
let recorder: Server;
let recorderPort = 0;
let sequence = 0;

interface Captured {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: Buffer;
}

async function listen(server: Server): Promise<number> {
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return (server.address() as AddressInfo).port;
}

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'vessel-hop-'));
  store = new SqliteStore(join(dir, 'vessel.db'));
  driver = new FakeDriver();
  core = new Core({ store, driver, gateway: new FakeGateway(), secretBox: new SecretBox(randomBytes(32)), log: silentLog, tenantLimits: ROOMY_TENANT_LIMITS, node: NODE });
  const none = { ratePerSec: 0, burst: 0 };
  host = await buildApi({ core, logger: false, rateLimit: none, unauthenticatedRateLimit: none, maxFileBytes: 4 * 1024 * 1024, listenHost: '127.0.0.1', fleet: vmHostRole(core, { secret: hostKey(SECRET, NODE), node: NODE }) });
  await host.listen({ host: '127.0.0.1', port: 0 });
  hostPort = (host.server.address() as AddressInfo).port;
  recorder = createServer((req, res) => {
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => {
      const headers: Record<string, string> = {};
      for (const [name, value] of Object.entries(req.headers)) if (typeof value === 'string') headers[name] = value;
      captured.push({ method: req.method!, url: req.url!, headers, body: Buffer.concat(parts) });
      res.writeHead(204).end();
    });
  });
  recorderPort = await listen(recorder);
});

after(async () => {
  await host.close();
  await core.close();
  recorder.close();
  recorder.closeAllConnections();
  rmSync(dir, { recursive: true, force: true });
});

/** The API node's part: sends each request on over the hop, as the forwarder does (a create's body read whole). */
async function apiNode(to: number): Promise<{ server: Server; port: number }> {
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const send = (body?: Buffer) =>
      forwardRequest(plainHopClient(SECRET), { name: NODE, internalUrl: `http://127.0.0.1:${to}` }, req, res, { principal, requestId: `hop-${++sequence}`, clientIp: '127.0.0.1', body }).then(
        (stream) => stream(),
        () => res.writeHead(503).end(),
      );
    if (req.method !== 'POST' || req.url !== '/v1/runtimes') return void send();
    const parts: Buffer[] = [];
    req.on('data', (d: Buffer) => parts.push(d));
    req.on('end', () => void send(Buffer.concat(parts)));
  });
  return { server, port: await listen(server) };
}

/** A plain HTTP call; answers status and body. */
function call(port: number, method: string, path: string, headers: Record<string, string>, body?: Buffer): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const out = request({ host: '127.0.0.1', port, method, path, headers }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    out.on('error', reject);
    out.end(body);
  });
}

/** What an API node sends to the host for this call, captured and not delivered. */
async function capture(method: string, path: string, headers: Record<string, string>, body?: Buffer): Promise<Captured> {
  const front = await apiNode(recorderPort);
  try {
    captured = [];
    assert.equal((await call(front.port, method, path, headers, body)).status, 204);
    assert.equal(captured.length, 1);
    return captured[0]!;
  } finally {
    front.server.close();
    front.server.closeAllConnections();
  }
}

/** A captured hop sent to the host, with `headers` changed and `body` instead of its own. */
function replay(hop: Captured, body: Buffer, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const sent: Record<string, string> = { ...hop.headers, ...headers };
  delete sent.host;
  delete sent.connection;
  // The body's own framing: chunked stays chunked (Node frames it), a length is the body's.
  if (sent['transfer-encoding'] === undefined) sent['content-length'] = String(body.length);
  return call(hostPort, hop.method, hop.url, sent, body);
}

const json = (value: unknown) => Buffer.from(JSON.stringify(value));
const runtimeNamed = async (name: string) => store.runtimes.find(DEFAULT_TENANT, name);

/** Texts of the same 32 bytes that Node's lenient base64url decoder accepts. */
function sameMacTexts(sig: string): string[] {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const otherLast = sig.slice(0, -1) + alphabet[alphabet.indexOf(sig.at(-1)!) ^ 1];
  return [`${sig}=`, `${sig}!`, `${sig}==`, otherLast];
}

test('a genuine hop works: a create sent whole, a file streamed, a read without a body', async () => {
  const front = await apiNode(hostPort);
  try {
    const created = await call(front.port, 'POST', '/v1/runtimes', { 'content-type': 'application/json' }, json({ display_name: 'genuine' }));
    assert.equal(created.status, 201, created.body);
    const payload = randomBytes(300 * 1024 + 5);
    const put = await call(front.port, 'PUT', '/v1/runtimes/genuine/files?path=/root/blob', { 'content-type': 'application/octet-stream' }, payload);
    assert.equal(put.status, 200, put.body);
    const rt = await runtimeNamed('genuine');
    assert.ok(driver.vms.get(rt!.id)!.files.get('/root/blob')!.equals(payload), 'the file arrived byte for byte');
    const read = await call(front.port, 'GET', '/v1/runtimes/genuine', {});
    assert.equal(read.status, 200, read.body);
  } finally {
    front.server.close();
    front.server.closeAllConnections();
  }
});

test('a used hop is refused again, under every text of its signature, with its body or a new one', async () => {
  const hop = await capture('POST', '/v1/runtimes', { 'content-type': 'application/json' }, json({ display_name: 'first' }));
  assert.equal((await replay(hop, hop.body)).status, 201, 'its first use');
  assert.ok(await runtimeNamed('first'));
  const sig = hop.headers[SIGNATURE]!;
  const attempts = [sig, ...sameMacTexts(sig)];
  for (const [i, text] of attempts.entries()) {
    const again = await replay(hop, json({ display_name: `again-${i}` }), { [SIGNATURE]: text });
    assert.equal(again.status, 401, `${JSON.stringify(text)}: ${again.body}`);
    assert.equal(await runtimeNamed(`again-${i}`), undefined);
  }
  assert.equal((await replay(hop, hop.body)).status, 401, 'the same bytes again');
});

test('a create whose body was swapped on its way is refused, and nothing is created', async () => {
  const hop = await capture('POST', '/v1/runtimes', { 'content-type': 'application/json' }, json({ display_name: 'mine' }));
  // Never delivered as sent: the signature is fresh, the body is another (of the same length).
  const swapped = await replay(hop, json({ display_name: 'evil' }));
  assert.equal(swapped.status, 401, swapped.body);
  assert.equal(await runtimeNamed('evil'), undefined);
  assert.equal(await runtimeNamed('mine'), undefined);
});

test('a streamed file changed or cut short on its way is refused, and the file is not written', async () => {
  const front = await apiNode(hostPort);
  try {
    assert.equal((await call(front.port, 'POST', '/v1/runtimes', { 'content-type': 'application/json' }, json({ display_name: 'files' }))).status, 201);
  } finally {
    front.server.close();
    front.server.closeAllConnections();
  }
  const files = driver.vms.get((await runtimeNamed('files'))!.id)!.files;
  const payload = Buffer.alloc(200 * 1024, 'A');

  const changed = await capture('PUT', '/v1/runtimes/files/files?path=/root/changed', { 'content-type': 'application/octet-stream' }, payload);
  const body = Buffer.from(changed.body);
  // A byte of the payload well past the first 64 KiB.
  body[body.indexOf('AAAA', 100 * 1024)] = 'B'.charCodeAt(0);
  const refused = await replay(changed, body);
  assert.ok(refused.status >= 400 && refused.status < 500, `${refused.status} ${refused.body}`);
  assert.equal(files.has('/root/changed'), false);

  const cut = await capture('PUT', '/v1/runtimes/files/files?path=/root/cut', { 'content-type': 'application/octet-stream' }, payload);
  const short = await replay(cut, cut.body.subarray(0, cut.body.length - 64));
  assert.ok(short.status >= 400 && short.status < 500, `${short.status} ${short.body}`);
  assert.equal(files.has('/root/cut'), false);

  // The same capture, untouched, is the genuine hop: it writes the file.
  const whole = await capture('PUT', '/v1/runtimes/files/files?path=/root/whole', { 'content-type': 'application/octet-stream' }, payload);
  assert.equal((await replay(whole, whole.body)).status, 200);
  assert.ok(files.get('/root/whole')!.equals(payload));
});
