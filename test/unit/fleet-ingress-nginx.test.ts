/**
 * Runtime URLs behind a real reverse proxy (issue 30 §2): Debian's nginx, started here on
 * loopback with a config of its own and `keepalive` in its upstream block, in front of an API
 * node's ingress entry and two VM hosts' ingress listeners. nginx sends every request down the
 * upstream connections it keeps, whatever its Host: each must still reach the host of its own
 * runtime. Between nginx and the entry a counting TCP hop shows how many upstream connections
 * nginx opened. nginx also terminates TLS on a second port, as an ingress controller does, and
 * says so with X-Forwarded-Proto, which only a trusted proxy is believed on.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { Agent, createServer as createHttpServer, request, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { connect as tlsConnect } from 'node:tls';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { IngressEntry } from '../../src/cluster/ingress-entry.js';
import { FleetKeys, hostKey } from '../../src/cluster/fleet-keys.js';
import { HopCa } from '../../src/cluster/fleet-tls.js';
import type { NodeDirectory } from '../../src/core/node-directory.js';
import type { GatewayHooks, Store } from '../../src/core/ports.js';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';
import { Ingress } from '../../src/net/ingress.js';
import { RuntimeNet, RuntimeRegistry } from '../../src/net/runtime-registry.js';
import { quietLog } from '../support/egress-harness.js';
import { freePort } from '../support/service.js';

const NGINX = '/usr/sbin/nginx';
const SECRET = 'e'.repeat(40);
const dir = mkdtempSync(join(tmpdir(), 'vessel-nginx-'));

/** A runtime on a host of its own: its guest's http and https ports, and what it answers with. */
interface Runtime {
  id: string;
  node: string;
  name: string;
  guests: HttpServer[];
  httpPort: number;
  httpsPort: number;
}
const runtimes: Runtime[] = [];
const hosts: Array<{ ingress: Ingress; registry: RuntimeRegistry; port: number }> = [];
let entry: IngressEntry;
let untrustingEntry: IngressEntry;
let ENTRY_PORT = 0;
let UNTRUSTING_PORT = 0;
/** The counting hop between nginx and the entry. */
let hop: Server;
let HOP_PORT = 0;
let upstreamConnections = 0;
const hopSockets = new Set<Socket>();
let nginx: ChildProcess;
let NGINX_PORT = 0;
let NGINX_TLS_PORT = 0;

/** A guest that names its runtime, and says what it was told: path, client and protocol. Upgrades are echoed with its name. */
function guest(name: string): HttpServer {
  const server = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    req.resume();
    req.on('end', () => res.end(`${name} ${req.url} xff=${String(req.headers['x-forwarded-for'])} proto=${String(req.headers['x-forwarded-proto'])}`));
  });
  server.on('upgrade', (_req: IncomingMessage, socket: Socket) => {
    socket.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n');
    socket.on('data', (d: Buffer) => socket.write(`${name}:${d.toString()}`));
    socket.on('error', () => undefined);
  });
  return server;
}

async function listening(server: HttpServer | Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return (server.address() as AddressInfo).port;
}

/** Resolves once something accepts connections on `port` (nginx, started in the background). */
async function accepting(port: number, child: ChildProcess): Promise<void> {
  for (;;) {
    if (child.exitCode !== null) throw new Error(`nginx exited (${child.exitCode}) before it listened`);
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect({ host: '127.0.0.1', port }, () => {
        s.destroy();
        resolve(true);
      });
      s.on('error', () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 25));
  }
}

before(async () => {
  assert.equal(spawnSync(NGINX, ['-v']).status, 0, `${NGINX} is needed (Debian's nginx package: apt-get install nginx)`);
  const ca = await CertificateAuthority.loadOrCreate(dir);
  // Two VM hosts, each running one runtime; a runtime's ports: one exposed as http, one as https.
  for (const [i, name] of ['host-1', 'host-2'].entries()) {
    // Exposed as https, the host terminates TLS: the guest's port serves plain HTTP all the same.
    const guests = [guest(`runtime-${i + 1}`), guest(`runtime-${i + 1}`)];
    const httpPort = await listening(guests[0]!);
    const httpsPort = await listening(guests[1]!);
    const rt: Runtime = { id: randomUUID(), node: name, name: `runtime-${i + 1}`, guests, httpPort, httpsPort };
    runtimes.push(rt);
    const registry = new RuntimeRegistry();
    registry.add(new RuntimeNet({ runtimeId: rt.id, tenantId: 't', policy: { enabled: true, allowed_hosts: [] }, rules: [] }, `vsl-ngx${i}`, '127.0.0.1'));
    const hooks = {
      ingressTarget: async (id: string, port: number) => (id !== rt.id ? null : port === rt.httpPort ? { runtimeId: id, protocol: 'http' as const } : port === rt.httpsPort ? { runtimeId: id, protocol: 'https' as const } : null),
      activity: () => undefined,
    } as unknown as GatewayHooks;
    // The fleet's hosts share one CA: the entry verifies their https leaves with it.
    const ingress = new Ingress({ domain: 'localhost', registry, ca, hooks: () => hooks, log: quietLog, fleet: { secret: hostKey(SECRET, name), node: name } });
    const port = await freePort();
    await ingress.listen('127.0.0.1', port);
    hosts.push({ ingress, registry, port });
  }
  const specsOf = (rt: Runtime) => [{ runtime_port: rt.httpPort, protocol: 'http' }, { runtime_port: rt.httpsPort, protocol: 'https' }];
  const store = { runtimes: { findById: async (id: string) => runtimes.filter((r) => r.id === id).map((r) => ({ ...r, ingressSpecs: specsOf(r) }))[0] } } as unknown as Store;
  const nodes = {
    find: async (name: string) => {
      const at = ['host-1', 'host-2'].indexOf(name);
      return at === -1 ? undefined : { name, alive: true, ingressAddress: `127.0.0.1:${hosts[at]!.port}` };
    },
  } as unknown as NodeDirectory;
  const options = { store, nodes, domain: 'localhost', keys: new FleetKeys(SECRET), fleetCa: async () => ca.certPem, log: quietLog as never };
  // nginx (and the hop) connect from 127.0.0.1; clients of this test from other loopback addresses.
  entry = new IngressEntry({ ...options, trustedProxies: ['127.0.0.1'] });
  ENTRY_PORT = await freePort();
  await entry.listen('127.0.0.1', ENTRY_PORT);
  untrustingEntry = new IngressEntry({ ...options, trustedProxies: [] });
  UNTRUSTING_PORT = await freePort();
  await untrustingEntry.listen('127.0.0.1', UNTRUSTING_PORT);

  hop = createServer((client) => {
    upstreamConnections++;
    hopSockets.add(client);
    const to = connect({ host: '127.0.0.1', port: ENTRY_PORT });
    for (const s of [client, to]) s.on('error', () => undefined);
    client.on('close', () => {
      hopSockets.delete(client);
      to.destroy();
    });
    to.on('close', () => client.destroy());
    client.pipe(to).pipe(client);
  });
  HOP_PORT = await listening(hop);

  // nginx's own certificate, as cert-manager's would be: any server certificate (the clients here do not verify it).
  const proxyCa = await HopCa.shared(async (proposed) => proposed, { seal: (text) => text, open: (text) => text });
  const { cert, key } = await proxyCa.apiIdentity();
  writeFileSync(join(dir, 'proxy.crt'), cert);
  writeFileSync(join(dir, 'proxy.key'), key, { mode: 0o600 });
  NGINX_PORT = await freePort();
  NGINX_TLS_PORT = await freePort();
  // As ingress-nginx configures it: HTTP/1.1 upstream with keepalive, the Host passed on,
  // upgrades forwarded, X-Forwarded-* set, bodies streamed.
  const proxied = `
      proxy_pass http://vessel;
      proxy_http_version 1.1;
      proxy_set_header Host $host;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto $scheme;
      proxy_buffering off;
      proxy_request_buffering off;`;
  writeFileSync(
    join(dir, 'nginx.conf'),
    `daemon off;
master_process off;
pid ${dir}/nginx.pid;
error_log stderr warn;
events { worker_connections 256; }
http {
  access_log off;
  client_body_temp_path ${dir}/client_body;
  proxy_temp_path ${dir}/proxy;
  fastcgi_temp_path ${dir}/fastcgi;
  uwsgi_temp_path ${dir}/uwsgi;
  scgi_temp_path ${dir}/scgi;
  map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
  upstream vessel {
    server 127.0.0.1:${HOP_PORT};
    keepalive 8;
  }
  server {
    listen 127.0.0.1:${NGINX_PORT};
    location / {${proxied}
    }
  }
  server {
    listen 127.0.0.1:${NGINX_TLS_PORT} ssl;
    ssl_certificate ${dir}/proxy.crt;
    ssl_certificate_key ${dir}/proxy.key;
    location / {${proxied}
    }
  }
}
`,
  );
  nginx = spawn(NGINX, ['-p', `${dir}/`, '-c', join(dir, 'nginx.conf'), '-e', 'stderr'], { stdio: ['ignore', 'ignore', 'inherit'] });
  // Not left running if this process ends without its after hook (a crash, a kill by the runner).
  process.once('exit', () => nginx.exitCode === null && nginx.kill('SIGKILL'));
  await accepting(NGINX_PORT, nginx);
  await accepting(NGINX_TLS_PORT, nginx);
});

after(async () => {
  if (nginx?.exitCode === null) {
    const exited = new Promise((r) => nginx.once('exit', r));
    nginx.kill('SIGTERM');
    await exited;
  }
  for (const s of hopSockets) s.destroy();
  hop?.close();
  await entry?.close();
  await untrustingEntry?.close();
  for (const h of hosts) {
    await h.ingress.close();
    await Promise.all(h.registry.all().map((n) => h.registry.remove(n.id)));
  }
  for (const g of runtimes.flatMap((r) => r.guests)) {
    g.closeAllConnections();
    g.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

interface Answer {
  status: number;
  body: string;
}

/** One GET for `host` over `agent` (kept alive), from `localAddress`. */
function get(port: number, host: string, path: string, agent: Agent, localAddress: string, tls = false, headers: Record<string, string> = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const send = tls ? httpsRequest : request;
    const req = send({ host: '127.0.0.1', port, path, agent, localAddress, headers: { host, ...headers }, ...(tls ? { servername: host.replace(/:\d+$/, ''), rejectUnauthorized: false } : {}) }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

const nameOf = (rt: Runtime, port: number) => `${port}-${rt.id}.localhost`;

test('alternating requests for runtimes on two hosts, over one kept-alive nginx upstream connection, each reach their own runtime', async () => {
  const [a, b] = runtimes as [Runtime, Runtime];
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const before = upstreamConnections;
  try {
    for (let i = 0; i < 8; i++) {
      const rt = i % 2 === 0 ? a : b;
      const answer = await get(NGINX_PORT, nameOf(rt, rt.httpPort), `/req-${i}`, agent, '127.0.0.4');
      assert.equal(answer.status, 200, answer.body);
      // The visitor is the client nginx named (the entry trusts nginx's address), not nginx.
      assert.equal(answer.body, `${rt.name} /req-${i} xff=127.0.0.4 proto=http`);
    }
  } finally {
    agent.destroy();
  }
  assert.equal(upstreamConnections - before, 1, 'nginx sent all eight requests down one kept-alive connection');
});

test('a runtime that does not exist is answered 404 on the kept connection, and the next request on it is still routed', async () => {
  const [a] = runtimes as [Runtime];
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const missing = await get(NGINX_PORT, `${a.httpPort}-${randomUUID()}.localhost`, '/', agent, '127.0.0.4');
    assert.equal(missing.status, 404);
    assert.equal(JSON.parse(missing.body).error.code, 'not_found');
    assert.match((await get(NGINX_PORT, nameOf(a, a.httpPort), '/after', agent, '127.0.0.4')).body, /^runtime-1 \/after /);
  } finally {
    agent.destroy();
  }
});

/** An upgrade request for `host` on `socket`, then two messages each way after the 101: what the guest named itself as. */
async function upgradeExchange(socket: Socket, host: string): Promise<string[]> {
  socket.on('error', () => undefined);
  let got = '';
  socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
  const arrived = (text: string) =>
    new Promise<void>((resolve) => {
      const check = () => {
        if (!got.includes(text)) return;
        socket.off('data', check);
        resolve();
      };
      socket.on('data', check);
      check();
    });
  try {
    socket.write(`GET /ws HTTP/1.1\r\nHost: ${host}\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n`);
    await arrived('\r\n\r\n');
    assert.match(got, /^HTTP\/1\.1 101 /);
    const echoed: string[] = [];
    for (const message of ['ping', 'again']) {
      socket.write(message);
      await arrived(`:${message}`);
      echoed.push(new RegExp(`(runtime-\\d):${message}`).exec(got)?.[1] ?? '');
    }
    return echoed;
  } finally {
    socket.destroy();
  }
}

test('a WebSocket-style upgrade through nginx reaches its runtime and is spliced both ways after the 101', async () => {
  const [, b] = runtimes as [Runtime, Runtime];
  assert.deepEqual(await upgradeExchange(connect({ host: '127.0.0.1', port: NGINX_PORT, localAddress: '127.0.0.4' }), nameOf(b, b.httpPort)), ['runtime-2', 'runtime-2']);
});

test('an https spec behind nginx terminating TLS: reached, and its guest told https; not reached over plain HTTP', async () => {
  const [a, b] = runtimes as [Runtime, Runtime];
  const agent = new HttpsAgent({ keepAlive: true, maxSockets: 1 });
  try {
    for (const rt of [a, b, a]) {
      const answer = await get(NGINX_TLS_PORT, nameOf(rt, rt.httpsPort), '/secure', agent, '127.0.0.4', true);
      assert.equal(answer.status, 200, answer.body);
      assert.equal(answer.body, `${rt.name} /secure xff=127.0.0.4 proto=https`);
    }
    // An upgrade to an https spec (wss:// behind the proxy's TLS) reaches the runtime over TLS too.
    const host = nameOf(b, b.httpsPort);
    assert.deepEqual(await upgradeExchange(tlsConnect({ host: '127.0.0.1', port: NGINX_TLS_PORT, servername: host, rejectUnauthorized: false }), host), ['runtime-2', 'runtime-2']);
    // A spec exposed as http is not served to a client that came over https, as on a single host.
    assert.equal((await get(NGINX_TLS_PORT, nameOf(a, a.httpPort), '/', agent, '127.0.0.4', true)).status, 404);
  } finally {
    agent.destroy();
  }
  const plain = new Agent({ keepAlive: false });
  assert.equal((await get(NGINX_PORT, nameOf(a, a.httpsPort), '/', plain, '127.0.0.4')).status, 404);
});

test("X-Forwarded-Proto and X-Forwarded-For from a client that is not a trusted proxy are not believed", async () => {
  const [a] = runtimes as [Runtime];
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const forged = { 'x-forwarded-proto': 'https', 'x-forwarded-for': '203.0.113.9' };
  try {
    // Straight to an entry that trusts no one, and to the one that trusts nginx's address alone.
    for (const port of [UNTRUSTING_PORT, ENTRY_PORT]) {
      assert.equal((await get(port, nameOf(a, a.httpsPort), '/', agent, '127.0.0.5', false, forged)).status, 404, 'an https spec over plain HTTP');
      const answer = await get(port, nameOf(a, a.httpPort), '/direct', agent, '127.0.0.5', false, forged);
      assert.equal(answer.body, 'runtime-1 /direct xff=127.0.0.5 proto=http');
    }
  } finally {
    agent.destroy();
  }
});

/** Writes `bytes` on a new connection to `port` and reads until the entry closes it. */
function exchange(port: number, bytes: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.6' });
    let got = '';
    socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
    socket.on('close', () => resolve(got));
    socket.on('error', () => undefined);
    socket.write(bytes);
  });
}

test('pipelined requests for runtimes on two hosts, bodies framed each their own way: each answered by its runtime, in order', async () => {
  const [a, b] = runtimes as [Runtime, Runtime];
  const got = await exchange(
    ENTRY_PORT,
    `POST /one HTTP/1.1\r\nHost: ${nameOf(a, a.httpPort)}\r\nContent-Length: 5\r\n\r\nhello` +
      `POST /two HTTP/1.1\r\nHost: ${nameOf(b, b.httpPort)}\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n` +
      `GET /three HTTP/1.1\r\nHost: ${nameOf(a, a.httpPort)}\r\nConnection: close\r\n\r\n`,
  );
  const bodies = [...got.matchAll(/runtime-\d \/\w+/g)].map((m) => m[0]);
  assert.deepEqual(bodies, ['runtime-1 /one', 'runtime-2 /two', 'runtime-1 /three'], got);
});

test('requests the entry cannot route are answered here, in the error envelope', async () => {
  const [a] = runtimes as [Runtime];
  const host = nameOf(a, a.httpPort);
  const cases: Array<[string, number]> = [
    [`GET / HTTP/1.1\r\nHost: ${host}\r\nHost: ${host}\r\nConnection: close\r\n\r\n`, 400],
    [`GET http://${host}/ HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`, 400],
    [`POST / HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n0\r\n\r\n`, 400],
    [`GET / HTTP/1.1\r\nHost: ${a.httpPort}-${a.id}.elsewhere.test\r\nConnection: close\r\n\r\n`, 404],
    [`GET / HTTP/1.1\r\nHost: 9-${a.id}.localhost\r\nConnection: close\r\n\r\n`, 404],
  ];
  for (const [bytes, status] of cases) {
    const got = await exchange(ENTRY_PORT, bytes);
    assert.match(got, new RegExp(`^HTTP/1\\.1 ${status} `), bytes);
    assert.ok(got.includes('"error":{"code":'), got);
  }
});
