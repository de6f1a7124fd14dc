/**
 * Visitors relayed by API nodes' ingress entries are counted and forwarded as themselves (issue
 * 26): the entry starts each connection to a VM host's ingress with a PROXY v2 header signed for
 * that host (src/net/proxy-header.ts), and the host believes no other. A real host ingress and
 * two real entries on loopback; visitors bind addresses of their own in 127.0.0.0/8.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { connect as tlsConnect } from 'node:tls';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { IngressEntry } from '../../src/cluster/ingress-entry.js';
import { FleetKeys, hostKey } from '../../src/cluster/fleet-keys.js';
import { MAX_PROXY_HEADER_BYTES, ProxiedClients, parseProxyHeader, proxyHeader } from '../../src/net/proxy-header.js';
import type { NodeDirectory } from '../../src/core/node-directory.js';
import type { GatewayHooks, Store } from '../../src/core/ports.js';
import { CertificateAuthority } from '../../src/net/certificate-authority.js';
import { Ingress, MAX_INGRESS_CONNECTIONS_PER_SOURCE } from '../../src/net/ingress.js';
import { RuntimeNet, RuntimeRegistry } from '../../src/net/runtime-registry.js';
import { quietLog } from '../support/egress-harness.js';
import { freePort } from '../support/service.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const SECRET = 'f'.repeat(40);
/** The host's own key: what its ingress checks PROXY headers with. */
const HOST_KEY = hostKey(SECRET, 'host-1');
const NODE = 'host-1';
const RUNTIME = randomUUID();
const registry = new RuntimeRegistry();
const dir = mkdtempSync(join(tmpdir(), 'vessel-proxy-'));
let ingress: Ingress;
let HOST_PORT = 0;
const entries: Array<{ entry: IngressEntry; port: number }> = [];
/** A guest that answers each request with the X-Forwarded-For it was given. */
let echo: HttpServer;
let ECHO_PORT = 0;
let echoTls: HttpServer;
let ECHO_TLS_PORT = 0;
let echoed = 0;
/** A guest that reads and never answers: a request to it holds its connection open. */
let muted: Server;
let MUTED_PORT = 0;
let mutedAccepted = 0;
const mutedOpen = new Set<Socket>();

const now = () => Date.now();
const from = (address: string, port = 40000) => ({ address, port });

before(async () => {
  const answerXff = (req: IncomingMessage, res: ServerResponse) => {
    echoed++;
    req.resume();
    req.on('end', () => res.end(String(req.headers['x-forwarded-for'])));
  };
  echo = createHttpServer(answerXff);
  // Exposed as https: the host terminates TLS, the guest gets plain HTTP.
  echoTls = createHttpServer(answerXff);
  muted = createServer((s) => {
    mutedAccepted++;
    mutedOpen.add(s);
    s.on('error', () => undefined);
    s.on('close', () => mutedOpen.delete(s));
    s.resume();
  });
  for (const s of [echo, echoTls, muted]) await new Promise<void>((r) => s.listen(0, '127.0.0.1', () => r()));
  ECHO_PORT = (echo.address() as AddressInfo).port;
  ECHO_TLS_PORT = (echoTls.address() as AddressInfo).port;
  MUTED_PORT = (muted.address() as AddressInfo).port;
  registry.add(new RuntimeNet({ runtimeId: RUNTIME, tenantId: 't', policy: { enabled: true, allowed_hosts: [] }, rules: [] }, 'vsl-proxied', '127.0.0.1'));
  const hooks = { ingressTarget: async (id: string, port: number) => (id === RUNTIME ? { runtimeId: RUNTIME, protocol: port === ECHO_TLS_PORT ? ('https' as const) : ('http' as const) } : null), activity: () => undefined } as unknown as GatewayHooks;
  ingress = new Ingress({ domain: 'localhost', registry, ca: await CertificateAuthority.loadOrCreate(dir), hooks: () => hooks, log: quietLog, fleet: { secret: hostKey(SECRET, NODE), node: NODE } });
  HOST_PORT = await freePort();
  await ingress.listen('127.0.0.1', HOST_PORT);
  // Two API nodes' entries, as a fleet has: the store and the leases say RUNTIME runs on NODE.
  const store = { runtimes: { findById: async (id: string) => (id === RUNTIME ? { id, node: NODE, ingressSpecs: [{ runtime_port: ECHO_PORT, protocol: 'http' }, { runtime_port: ECHO_TLS_PORT, protocol: 'https' }, { runtime_port: MUTED_PORT, protocol: 'http' }] } : undefined) } } as unknown as Store;
  const nodes = { find: async (name: string) => (name === NODE ? { name, alive: true, ingressAddress: `127.0.0.1:${HOST_PORT}` } : undefined) } as unknown as NodeDirectory;
  for (let i = 0; i < 2; i++) {
    const entry = new IngressEntry({ store, nodes, domain: 'localhost', keys: new FleetKeys(SECRET), fleetCa: () => Promise.reject(new Error('no https here')), trustedProxies: [], log: quietLog as never });
    const port = await freePort();
    await entry.listen('127.0.0.1', port);
    entries.push({ entry, port });
  }
});

after(async () => {
  for (const { entry } of entries) await entry.close();
  await ingress.close();
  await Promise.all(registry.all().map((n) => registry.remove(n.id)));
  for (const s of mutedOpen) s.destroy();
  muted.close();
  for (const s of [echo, echoTls]) {
    s.closeAllConnections();
    s.close();
  }
  rmSync(dir, { recursive: true, force: true });
});

async function settle(condition: () => boolean, ms = 10_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return condition();
}

const get = (port: number) => `GET /xff HTTP/1.1\r\nHost: ${port}-${RUNTIME}.localhost\r\nConnection: close\r\n\r\n`;

/** A visitor's request from `localAddress` to `port`: everything read back until the connection closes. */
const visit = (port: number, localAddress: string, bytes: string | Buffer) => exchangeBytes(connect({ host: '127.0.0.1', port, localAddress }), bytes);

/** Writes `bytes` and reads back until the connection closes; a reset (a refusal with bytes unread) ends it too. */
function exchangeBytes(socket: Socket, bytes: string | Buffer): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    socket.setTimeout(5000, () => socket.end());
    socket.on('data', (d: Buffer) => (got += d.toString('latin1')));
    socket.on('close', () => resolve(got));
    socket.on('error', () => undefined);
    socket.write(bytes);
  });
}

const body = (response: string) => response.slice(response.indexOf('\r\n\r\n') + 4);

test('a header round-trips: IPv4, IPv6, and an IPv4 visitor seen on a dual-stack socket', () => {
  const cases: Array<[string, string, string]> = [
    ['203.0.113.7', '10.0.0.1', '203.0.113.7'],
    ['2001:db8::7', '2001:db8::1', '2001:db8::7'],
    ['::ffff:198.51.100.9', '::ffff:10.0.0.1', '198.51.100.9'],
    ['2001:db8:0:0:1:0:0:1', '::1', '2001:db8::1:0:0:1'],
  ];
  for (const [source, destination, seen] of cases) {
    const header = proxyHeader(SECRET, NODE, from(source, 51234), from(destination, 443), now());
    assert.ok(header.length <= MAX_PROXY_HEADER_BYTES);
    const parsed = parseProxyHeader(Buffer.concat([header, Buffer.from('GET / HTTP/1.1\r\n')]));
    assert.equal(parsed.kind, 'ok');
    if (parsed.kind !== 'ok') continue;
    assert.equal(parsed.length, header.length, 'nothing after the header is taken');
    assert.deepEqual(parsed.source, from(seen, 51234));
    assert.equal(new ProxiedClients(SECRET, NODE).verify(parsed), null);
  }
});

test('a header is believed only signed for this host, within a minute, and once', () => {
  const t = now();
  const header = proxyHeader(SECRET, NODE, from('203.0.113.7'), from('10.0.0.1', 443), t);
  const parsed = parseProxyHeader(header);
  assert.equal(parsed.kind, 'ok');
  if (parsed.kind !== 'ok') return;
  const clients = new ProxiedClients(SECRET, NODE);
  assert.equal(clients.verify(parsed, t), null);
  assert.match(String(clients.verify(parsed, t)), /used before/);
  assert.match(String(new ProxiedClients('g'.repeat(40), NODE).verify(parsed, t)), /not signed/);
  assert.match(String(new ProxiedClients(SECRET, 'host-2').verify(parsed, t)), /not signed/);
  assert.match(String(new ProxiedClients(SECRET, NODE).verify(parsed, t + 61_000)), /minute/);
  // The visitor's address, changed in a signed header, breaks its signature.
  const moved = Buffer.from(header);
  moved[16] = 198;
  const reparsed = parseProxyHeader(moved);
  assert.ok(reparsed.kind === 'ok' && new ProxiedClients(SECRET, NODE).verify(reparsed, t) !== null);
});

test('truncated, oversized and garbage headers: incomplete until whole, refused from the fixed part, never thrown on', () => {
  const header = proxyHeader(SECRET, NODE, from('2001:db8::7'), from('2001:db8::1', 443), now());
  for (let n = 0; n < header.length; n++) assert.equal(parseProxyHeader(header.subarray(0, n)).kind, 'incomplete', `${n} bytes`);
  // Not a PROXY v2 start: HTTP, TLS, PROXY v1 text, a near miss of the signature.
  for (const start of ['GET / HTTP/1.1\r\n', '\x16\x03\x01\x02\x00', 'PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n', '\r\n\r\n\0\r\nQUIX\n']) assert.equal(parseProxyHeader(Buffer.from(start, 'latin1')).kind, 'none', JSON.stringify(start));
  const variant = (at: number, value: number) => {
    const b = Buffer.from(header);
    b[at] = value;
    return parseProxyHeader(b).kind;
  };
  assert.equal(variant(12, 0x20), 'bad', 'LOCAL');
  assert.equal(variant(12, 0x31), 'bad', 'version 3');
  assert.equal(variant(13, 0x22), 'bad', 'UDP');
  assert.equal(variant(13, 0x31), 'bad', 'a UNIX socket');
  // Oversized: a length field larger than ours is refused from the first 16 bytes alone.
  const oversized = Buffer.from(header.subarray(0, 16));
  oversized.writeUInt16BE(0xffff, 14);
  assert.equal(parseProxyHeader(oversized).kind, 'bad');
  // A header with another TLV in front of ours, or none.
  const otherTlv = Buffer.from(header);
  otherTlv[16 + 36] = 0x04;
  assert.equal(parseProxyHeader(otherTlv).kind, 'bad');
  // Every single-byte change parses without throwing, and none is believed.
  const clients = new ProxiedClients(SECRET, NODE);
  for (let i = 0; i < 3000; i++) {
    const b = Buffer.from(header);
    const at = i % b.length;
    b[at] = (b[at]! + 1 + (i % 255)) & 0xff;
    const parsed = parseProxyHeader(b);
    if (parsed.kind === 'ok') assert.notEqual(clients.verify(parsed), null, `byte ${at} changed and still believed`);
  }
  for (let i = 0; i < 500; i++) parseProxyHeader(randomBytes(i % (MAX_PROXY_HEADER_BYTES + 20)));
});

test('through the entries, X-Forwarded-For is the visitor, not the API node', async () => {
  const answer = await visit(entries[0]!.port, '127.0.0.3', get(ECHO_PORT));
  assert.match(answer, /^HTTP\/1\.1 200 /);
  assert.equal(body(answer), '127.0.0.3');
});

test('a TLS visitor through the entry: the host takes the header off, then terminates TLS on the bytes after it', async () => {
  const socket = connect({ host: '127.0.0.1', port: entries[1]!.port, localAddress: '127.0.0.4' });
  const tls = tlsConnect({ socket, servername: `${ECHO_TLS_PORT}-${RUNTIME}.localhost`, rejectUnauthorized: false });
  const answer = await exchangeBytes(tls, get(ECHO_TLS_PORT));
  assert.match(answer, /^HTTP\/1\.1 200 /);
  assert.equal(body(answer), '127.0.0.4');
});

test("64 connections of one visitor, across two API nodes, do not shut out another visitor; the visitor's 65th is refused", async () => {
  const hold = `POST /hold HTTP/1.1\r\nHost: ${MUTED_PORT}-${RUNTIME}.localhost\r\nContent-Length: 1000000\r\n\r\n`;
  const before = mutedAccepted;
  const a: Socket[] = [];
  const open = (entryPort: number) => {
    const s = connect({ host: '127.0.0.1', port: entryPort, localAddress: '127.0.0.2' });
    s.on('error', () => undefined);
    // Read: the 65th is answered (503, the host refused its visitor) and then closed.
    s.resume();
    s.write(hold);
    a.push(s);
    return s;
  };
  try {
    // Half through each API node: each entry's own cap (64 a visitor) is not what stops the 65th.
    for (let i = 0; i < MAX_INGRESS_CONNECTIONS_PER_SOURCE; i++) open(entries[i % 2]!.port);
    assert.ok(await settle(() => mutedAccepted - before === MAX_INGRESS_CONNECTIONS_PER_SOURCE), `${mutedAccepted - before} of the visitor's requests reached the guest`);
    assert.ok(a.every((s) => !s.destroyed));

    const other = await visit(entries[0]!.port, '127.0.0.3', get(ECHO_PORT));
    assert.match(other, /^HTTP\/1\.1 200 /, 'another visitor is served through the same API node');
    assert.equal(body(other), '127.0.0.3');

    const extra = open(entries[0]!.port);
    await new Promise((r) => extra.once('close', r));
    assert.equal(mutedAccepted - before, MAX_INGRESS_CONNECTIONS_PER_SOURCE, "the 65th never reached the guest: the host refused it as the visitor's");
    assert.equal(a.filter((s) => s.destroyed).length, 1, 'the 64 before it stay open');
  } finally {
    for (const s of a) s.destroy();
  }
  // Its places come back when its connections end.
  assert.ok(await settle(() => mutedOpen.size === 0));
  assert.equal(body(await visit(entries[1]!.port, '127.0.0.2', get(ECHO_PORT))), '127.0.0.2', 'the visitor is served again');
});

test('a PROXY header not signed for this host, sent straight to it, is refused, and nothing reaches the guest', async () => {
  const request = Buffer.from(get(ECHO_PORT));
  const sent = (header: Buffer) => visit(HOST_PORT, '127.0.0.9', Buffer.concat([header, request]));
  const unsigned = Buffer.from(proxyHeader(HOST_KEY, NODE, from('203.0.113.50'), from('127.0.0.1', HOST_PORT)).subarray(0, 28));
  unsigned.writeUInt16BE(12, 14);
  const forged = [
    proxyHeader('x'.repeat(40), NODE, from('203.0.113.50'), from('127.0.0.1', HOST_PORT)),
    proxyHeader(HOST_KEY, 'host-2', from('203.0.113.50'), from('127.0.0.1', HOST_PORT)),
    proxyHeader(HOST_KEY, NODE, from('203.0.113.50'), from('127.0.0.1', HOST_PORT), now() - 120_000),
    unsigned,
  ];
  const before = echoed;
  for (const [i, header] of forged.entries()) assert.equal(await sent(header), '', `forged header ${i} was answered`);
  assert.equal(echoed, before, 'no request behind a forged header reached the guest');

  // Signed for this host: believed once; the same header again is refused.
  const genuine = proxyHeader(HOST_KEY, NODE, from('203.0.113.51'), from('127.0.0.1', HOST_PORT));
  assert.equal(body(await sent(genuine)), '203.0.113.51');
  assert.equal(await sent(genuine), '', 'a header used before');
  // Without a header, a direct visitor is itself.
  assert.equal(body(await visit(HOST_PORT, '127.0.0.9', get(ECHO_PORT))), '127.0.0.9');
});

test("an API node's connections are not counted as its own while their headers are on the way", async () => {
  const apiNode = '127.0.0.5';
  // It is known as one of the fleet's once it sent a signed header.
  assert.equal(body(await visit(HOST_PORT, apiNode, Buffer.concat([proxyHeader(HOST_KEY, NODE, from('203.0.113.60'), from('127.0.0.1', HOST_PORT)), Buffer.from(get(ECHO_PORT))]))), '203.0.113.60');
  // More connections than one address may hold, opened before any header is sent on them.
  const count = MAX_INGRESS_CONNECTIONS_PER_SOURCE + 6;
  const sockets = await Promise.all(
    Array.from({ length: count }, () =>
      new Promise<Socket>((resolve, reject) => {
        const s = connect({ host: '127.0.0.1', port: HOST_PORT, localAddress: apiNode }, () => resolve(s));
        s.on('error', reject);
      }),
    ),
  );
  const answers = await Promise.all(
    sockets.map((s, i) => exchangeBytes(s, Buffer.concat([proxyHeader(HOST_KEY, NODE, from(`203.0.113.${100 + (i % 100)}`), from('127.0.0.1', HOST_PORT)), Buffer.from(get(ECHO_PORT))]))),
  );
  assert.deepEqual(answers.map((r, i) => (r.startsWith('HTTP/1.1 200 ') ? body(r) : `refused ${i}`)), sockets.map((_, i) => `203.0.113.${100 + (i % 100)}`));
});
