/**
 * Ingress in-process: a "guest" is a loopback upstream that records what reaches it. Bad TLS
 * handshakes leave no descriptor behind, one client address cannot hold more than its share of
 * connections, bodies reach the guest framed, only runtime ids route, and a client that trickles
 * its request head or body is closed at its deadline.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { GatewayHooks } from '../../src/core/ports.js';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';
import { Ingress, MAX_INGRESS_CONNECTIONS_PER_SOURCE, parseIngressHost } from '../../src/net/ingress.js';
import type { RequestDeadlineOptions } from '../../src/net/request-deadlines.js';
import { RuntimeNet, RuntimeRegistry } from '../../src/net/runtime-registry.js';
import { freePort } from '../support/service.js';
import { BAD_RESPONSES, Upstreams } from '../support/upstream.js';
import { quietLog } from '../support/egress-harness.js';
import { exchange } from '../support/exchange.js';

const up = new Upstreams();
const registry = new RuntimeRegistry();
const RUNTIME = randomUUID();
let ingress: Ingress;
let PORT = 0;
let GUEST_PORT = 0;
/** A guest port whose server answers with raw scripted bytes (Upstreams.scripted). */
let SCRIPTED_PORT = 0;

before(async () => {
  await up.start();
  GUEST_PORT = up.port(up.recorded);
  SCRIPTED_PORT = up.port(up.scripted);
  registry.add(new RuntimeNet({ runtimeId: RUNTIME, tenantId: 't', policy: { enabled: true, allowed_hosts: [] }, rules: [] }, 'vsl-ingress', '127.0.0.1'));
  const hooks = {
    ingressTarget: async (id: string, port: number) => (id === RUNTIME && (port === GUEST_PORT || port === SCRIPTED_PORT) ? { runtimeId: RUNTIME, protocol: 'http' as const } : null),
    activity: () => undefined,
  } as unknown as GatewayHooks;
  ingress = new Ingress({ domain: 'localhost', registry, ca: await CertificateAuthority.loadOrCreate(up.dir), hooks: () => hooks, log: quietLog });
  PORT = await freePort();
  await ingress.listen('127.0.0.1', PORT);
});
after(async () => {
  await ingress.close();
  await Promise.all(registry.all().map((n) => registry.remove(n.id)));
  up.close();
});

const openFds = () => readdirSync('/proc/self/fd').length;

async function settle(condition: () => boolean, ms = 5000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  return condition();
}

test('ingress hosts name a port and a runtime id; a display name routes nowhere', () => {
  const id = randomUUID();
  assert.deepEqual(parseIngressHost(`8000-${id.toUpperCase()}.localhost:8081`, 'localhost'), { port: 8000, runtimeId: id });
  assert.equal(parseIngressHost('8000-web.localhost', 'localhost'), null);
  assert.equal(parseIngressHost('1-a,cn=x.localhost', 'localhost'), null);
  assert.equal(parseIngressHost(`0-${id}.localhost`, 'localhost'), null);
  assert.equal(parseIngressHost(`8000-${id}.other`, 'localhost'), null);
});

test('bad TLS handshakes are closed, and leave no descriptor open', async () => {
  const baseline = openFds();
  const names = ['1-a,cn=x.localhost', `443-${randomUUID()}.localhost`, `${GUEST_PORT}-${RUNTIME}.localhost`];
  const handshake = (servername: string) =>
    new Promise<void>((resolve) => {
      const socket = connect({ host: '127.0.0.1', port: PORT, localAddress: '127.0.0.30' });
      const c = tlsConnect({ socket, servername, rejectUnauthorized: false });
      c.on('error', () => undefined);
      c.on('close', () => resolve());
    });
  // In rounds that stay under the per-source cap, so each handshake is refused for what it says.
  for (let round = 0; round < 4; round++) await Promise.all(Array.from({ length: 50 }, (_, i) => handshake(names[i % names.length]!)));
  assert.ok(await settle(() => openFds() <= baseline), `descriptors: ${openFds()} open, ${baseline} before`);
});

test('one client address holds at most its share of ingress connections', async () => {
  const extra = 5;
  let closedEarly = 0;
  const sockets = Array.from({ length: MAX_INGRESS_CONNECTIONS_PER_SOURCE + extra }, () => {
    const s = connect({ host: '127.0.0.1', port: PORT, localAddress: '127.0.0.31' });
    s.on('error', () => undefined);
    s.on('close', () => closedEarly++);
    return s;
  });
  assert.ok(await settle(() => closedEarly >= extra, 3000));
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(closedEarly, extra, 'the connections under the cap stay open');
  const other = connect({ host: '127.0.0.1', port: PORT, localAddress: '127.0.0.32' });
  other.on('error', () => undefined);
  await new Promise((r) => setTimeout(r, 200));
  assert.equal(other.destroyed, false, 'another address is not affected');
  for (const s of [...sockets, other]) s.destroy();
});

function visit(agent: Agent, host: string, method: string, path: string, headers: string[], body?: string, port = PORT): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request({ host: '127.0.0.1', port, method, path, headers: ['Host', host, ...headers], setHost: false, agent }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text }));
    });
    req.setTimeout(5000, () => req.destroy(new Error('no answer within 5 s')));
    req.on('error', reject);
    req.end(body);
  });
}

test('a chunked body reaches the guest framed: a request hidden in it is only ever body', async () => {
  const host = `${GUEST_PORT}-${RUNTIME}.localhost`;
  const visitor = new Agent({ keepAlive: true, maxSockets: 1 });
  const inner = 'GET /ingress-smuggled HTTP/1.1\r\nHost: x\r\nContent-Length: 300\r\n\r\n';
  for (const method of ['GET', 'DELETE']) {
    const r = await visit(visitor, host, method, `/ingress-carrier-${method}`, ['Transfer-Encoding', 'chunked'], inner);
    assert.equal(r.status, 200);
    assert.equal((await visit(new Agent(), host, 'GET', `/ingress-next-${method}`, [])).status, 200, 'the next visitor gets its own answer');
    assert.equal(up.hits(`/ingress-carrier-${method}`)[0]?.body, inner);
  }
  assert.equal(up.hits('/ingress-smuggled').length, 0);
  assert.match(up.received, /GET \/ingress-carrier-GET HTTP\/1\.1\r\n(?:[^\r]+\r\n)*Transfer-Encoding: chunked\r\n/);
  assert.equal((await visit(visitor, `${GUEST_PORT}-web.localhost`, 'GET', '/by-name', [])).status, 404);
  visitor.destroy();
});

/** Writes `bytes` to the ingress port and returns all it reads back until it closes (or 2 s pass). */
function rawVisit(bytes: string, localAddress = '127.0.0.33'): Promise<string> {
  return exchange(connect({ host: '127.0.0.1', port: PORT, localAddress }), bytes);
}

test('a guest status line or header the gateway cannot write is a 502 for that request alone', async () => {
  for (const [path, [response]] of Object.entries(BAD_RESPONSES)) up.scripts.set(path, response);
  for (const [path, [, statusLine]] of Object.entries(BAD_RESPONSES)) {
    const got = await rawVisit(`GET ${path} HTTP/1.1\r\nHost: ${SCRIPTED_PORT}-${RUNTIME}.localhost\r\nConnection: close\r\n\r\n`);
    assert.match(got, statusLine, `${path}: ${JSON.stringify(got.slice(0, 60))}`);
  }
  assert.equal((await visit(new Agent(), `${GUEST_PORT}-${RUNTIME}.localhost`, 'GET', '/after-bad-status', [])).status, 200, 'still serving');
});

test('a connection that delivers no whole request head in time is closed: silent, slow, or kept alive idle', async () => {
  const hooks = { ingressTarget: async () => ({ runtimeId: RUNTIME, protocol: 'http' as const }), activity: () => undefined } as unknown as GatewayHooks;
  const quick = new Ingress({ domain: 'localhost', registry, ca: await CertificateAuthority.loadOrCreate(up.dir), hooks: () => hooks, log: quietLog, headersTimeoutMs: 300 });
  const port = await freePort();
  await quick.listen('127.0.0.1', port);
  const open = (first?: string) => {
    const s = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.34' });
    s.on('error', () => undefined);
    let got = '';
    s.on('data', (d) => (got += d.toString()));
    if (first !== undefined) s.write(first);
    return { s, got: () => got };
  };
  const silent = open();
  const partial = open(`GET / HTTP/1.1\r\nHost: ${GUEST_PORT}-${RUNTIME}.localhost\r\nX-Slow: a`);
  const keptAlive = open(`GET /timeout-keepalive HTTP/1.1\r\nHost: ${GUEST_PORT}-${RUNTIME}.localhost\r\n\r\n`);
  try {
    assert.ok(await settle(() => silent.s.destroyed && partial.s.destroyed, 5000), 'the silent and the slow connection are closed');
    assert.ok(await settle(() => keptAlive.s.destroyed, 5000), 'the idle kept-alive connection is closed');
    assert.match(keptAlive.got(), /^HTTP\/1\.1 200 /, 'after its answer');
    assert.equal(silent.got(), '');
  } finally {
    for (const c of [silent, partial, keptAlive]) c.s.destroy();
    await quick.close();
  }
});

test('an upgrade is spliced only once the guest answers 101: requests pipelined behind a refused one never reach it', async () => {
  const host = `${SCRIPTED_PORT}-${RUNTIME}.localhost`;
  up.scripts.set('/ws-refused', 'HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
  up.scripts.set('/ws-ok', 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n');
  const upgrade = (path: string) => `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`;
  const pipelined = 'GET /ws-pipelined HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 10.0.0.1\r\n\r\n';

  const refused = await rawVisit(upgrade('/ws-refused') + pipelined, '127.0.0.41');
  assert.match(refused, /^HTTP\/1\.1 400 /);
  assert.ok(up.scriptedPaths.includes('/ws-refused'));
  assert.ok(!up.scriptedReceived.includes('/ws-pipelined'), 'nothing behind a refused upgrade reaches the guest');

  const accepted = await rawVisit(upgrade('/ws-ok') + 'frame-bytes-after-101', '127.0.0.42');
  assert.match(accepted, /^HTTP\/1\.1 101 /);
  assert.ok(up.scriptedReceived.endsWith('frame-bytes-after-101'), 'after a 101 the client\'s bytes flow to the guest');
});

/** An ingress of its own with the deadlines `opts` sets, routing every port of RUNTIME over http. */
async function ingressWith(opts: RequestDeadlineOptions): Promise<{ ingress: Ingress; port: number }> {
  const hooks = { ingressTarget: async () => ({ runtimeId: RUNTIME, protocol: 'http' as const }), activity: () => undefined } as unknown as GatewayHooks;
  const ingress = new Ingress({ domain: 'localhost', registry, ca: await CertificateAuthority.loadOrCreate(up.dir), hooks: () => hooks, log: quietLog, ...opts });
  const port = await freePort();
  await ingress.listen('127.0.0.1', port);
  return { ingress, port };
}

/** A guest port that reads all it is sent and never answers; it counts connections and bytes. */
async function mutedGuest(): Promise<{ port: number; open: Set<Socket>; accepted: () => number; bytes: () => number; close(): void }> {
  const open = new Set<Socket>();
  let accepted = 0;
  let bytes = 0;
  const server = createServer((s) => {
    accepted++;
    open.add(s);
    s.on('data', (d: Buffer) => (bytes += d.length));
    s.on('close', () => open.delete(s));
    s.on('error', () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  return {
    port: (server.address() as AddressInfo).port,
    open,
    accepted: () => accepted,
    bytes: () => bytes,
    close: () => {
      for (const s of open) s.destroy();
      server.close();
    },
  };
}

test('a request body that trickles is closed at its idle deadline, the guest side too, and its client gets its places back', async () => {
  const { ingress: quick, port } = await ingressWith({ bodyIdleTimeoutMs: 200 });
  const guest = await mutedGuest();
  const head = `POST /trickle HTTP/1.1\r\nHost: ${guest.port}-${RUNTIME}.localhost\r\nContent-Length: 1000000000\r\n\r\n`;
  // As many as one address may hold: while they are open, nothing more of it is served.
  const visitors = Array.from({ length: MAX_INGRESS_CONNECTIONS_PER_SOURCE }, () => {
    const s = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.35' });
    s.on('error', () => undefined);
    s.write(head);
    return s;
  });
  // A byte every 50 ms each: never silent for 200 ms, far below the minimum rate.
  const drip = setInterval(() => visitors.forEach((s) => s.destroyed || s.write('x')), 50);
  try {
    assert.ok(await settle(() => guest.accepted() === visitors.length), `${guest.accepted()} requests reached the guest`);
    assert.ok(await settle(() => visitors.every((s) => s.destroyed)), `${visitors.filter((s) => !s.destroyed).length} trickling visitors still open`);
    assert.ok(await settle(() => guest.open.size === 0), `${guest.open.size} guest connections still open`);
    const again = new Agent({ localAddress: '127.0.0.35' } as ConstructorParameters<typeof Agent>[0]);
    assert.equal((await visit(again, `${GUEST_PORT}-${RUNTIME}.localhost`, 'GET', '/after-trickle', [], undefined, port)).status, 200, 'the address is served again');
    again.destroy();
  } finally {
    clearInterval(drip);
    for (const s of visitors) s.destroy();
    guest.close();
    await quick.close();
  }
});

test('a body that keeps a fair rate outlives its idle windows, but the whole request has a deadline', async () => {
  const { ingress: quick, port } = await ingressWith({ bodyIdleTimeoutMs: 200, requestTimeoutMs: 2000 });
  const guest = await mutedGuest();
  const visitor = connect({ host: '127.0.0.1', port, localAddress: '127.0.0.36' });
  visitor.on('error', () => undefined);
  visitor.write(`POST /steady HTTP/1.1\r\nHost: ${guest.port}-${RUNTIME}.localhost\r\nTransfer-Encoding: chunked\r\n\r\n`);
  // 32 KiB every 50 ms: twice the minimum progress in each tick, forever.
  const size = 32 * 1024;
  const chunk = `${size.toString(16)}\r\n${'x'.repeat(size)}\r\n`;
  const pump = setInterval(() => visitor.destroyed || visitor.write(chunk), 50);
  try {
    // Eight ticks: twice the idle timeout, and more.
    assert.ok(await settle(() => guest.bytes() >= 8 * size || visitor.destroyed), 'the body reaches the guest');
    assert.equal(visitor.destroyed, false, 'not closed while its body keeps coming');
    assert.ok(await settle(() => visitor.destroyed), 'closed at the request deadline');
    assert.ok(await settle(() => guest.open.size === 0), 'and so is the guest side');
  } finally {
    clearInterval(pump);
    visitor.destroy();
    guest.close();
    await quick.close();
  }
});

/** Each Set-Cookie value of a raw response, and whether any of its attributes is a Domain (however spelled). */
function setCookies(response: string): Array<{ value: string; domain: boolean }> {
  const head = response.slice(0, response.indexOf('\r\n\r\n'));
  return head.split('\r\n').filter((l) => /^set-cookie:/i.test(l)).map((l) => {
    const value = l.slice(l.indexOf(':') + 1).trim();
    return { value, domain: value.split(';').slice(1).some((a) => /domain/i.test(a.split('=')[0]!)) };
  });
}

test('a runtime cannot set a cookie for the ingress domain: every Set-Cookie reaches the visitor host-only', async () => {
  const host = `${SCRIPTED_PORT}-${RUNTIME}.localhost`;
  const cookies = [
    'a=1; Domain=localhost; Path=/',
    'b=2; domain=.localhost',
    'c=3; Path=/; HttpOnly',
    'd="x; Domain=localhost"; Secure',
    `e=5; Domain=${host}`,
    'f=6;DOMAIN = .LOCALHOST ;Max-Age=60;domain=localhost;domain=',
    'g=7; \tDo\tmain\t=\tlocalhost; SameSite=Lax',
  ];
  up.scripts.set('/cookies', `HTTP/1.1 200 OK\r\n${cookies.map((c) => `Set-Cookie: ${c}\r\n`).join('')}Content-Length: 2\r\n\r\nok`);
  const got = await rawVisit(`GET /cookies HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`);
  assert.match(got, /^HTTP\/1\.1 200 /);
  const seen = setCookies(got);
  assert.deepEqual(seen.map((c) => c.value.split(/[;=]/, 1)[0]), ['a', 'b', 'c', 'd', 'e', 'f', 'g'], 'every cookie is still set');
  for (const c of seen) assert.equal(c.domain, false, `no Domain attribute left: ${c.value}`);
  assert.ok(!/domain/i.test(seen.map((c) => c.value).join('\n')), 'no Domain anywhere');
  assert.deepEqual(seen.slice(0, 3).map((c) => c.value), ['a=1; Path=/', 'b=2', 'c=3; Path=/; HttpOnly'], 'the other attributes are kept byte for byte');
  assert.equal(seen[5]!.value, 'f=6;Max-Age=60');
});

test('an upgrade answer sets host-only cookies too; one whose lines clients could read apart is refused', async () => {
  const host = `${SCRIPTED_PORT}-${RUNTIME}.localhost`;
  up.scripts.set('/ws-cookie', 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSet-Cookie: w=1; Domain=localhost; Path=/\r\nset-cookie :v=2;domain=.LOCALHOST\r\n\r\n');
  // A bare LF ends a line for browsers: a Set-Cookie hidden behind it must not be relayed.
  up.scripts.set('/ws-hidden', 'HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nX-A: 1\nSet-Cookie: z=1; Domain=localhost\r\nConnection: Upgrade\r\n\r\n');
  const upgrade = (path: string) => `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`;
  const ok = await rawVisit(upgrade('/ws-cookie'), '127.0.0.43');
  assert.match(ok, /^HTTP\/1\.1 101 /);
  assert.ok(ok.includes('\r\nSet-Cookie: w=1; Path=/\r\nset-cookie :v=2\r\n\r\n'), JSON.stringify(ok));
  const hidden = await rawVisit(upgrade('/ws-hidden'), '127.0.0.44');
  assert.ok(!/domain/i.test(hidden), `nothing of it relayed: ${JSON.stringify(hidden)}`);
});
