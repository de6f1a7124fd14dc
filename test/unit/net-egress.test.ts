/**
 * The egress proxy and forwarder in-process, against loopback upstreams that record what reaches
 * them: request framing (smuggling), the decided Host, redaction of injected values, refused
 * methods, odd request targets, per-runtime and per-tenant connection caps, a detach closing
 * every connection of the runtime, deadlines for slow guests, and sniffing that waits for bytes.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { Ajv } from 'ajv';
import { SHARED_SCHEMAS } from '../../src/api/schemas.js';
import { sniffSocket } from '../../src/net/socket-ops.js';
import { EgressHarness } from '../support/egress-harness.js';
import { exchange } from '../support/exchange.js';
import { clientHello, splitRecords } from '../support/tls-hello.js';
import { BAD_RESPONSES } from '../support/upstream.js';

const h = new EgressHarness({ perRuntime: 3, perTenant: 4 });
const SECRET = 'sk/t+st&key=1 "q"%';
let HTTP = 0;

before(async () => {
  await h.start();
  HTTP = h.up.port(h.up.recorded);
  h.destination = { address: '127.0.0.1', port: HTTP };
});
after(() => h.close());

const seenPaths = () => h.up.seen.map((s) => s.url);
const hostHeaders = (raw: string[]) => raw.flatMap((name, i) => (i % 2 === 0 && name.toLowerCase() === 'host' ? [raw[i + 1]!] : []));

test('a chunked body is forwarded chunked for every method: a request hidden in it is only ever body', async () => {
  const net = h.runtime('rt-smuggle', '127.0.0.2', ['api.test'], [h.rule('r-smuggle', SECRET, { headerName: 'Authorization', valueFormat: 'Bearer ${credential}' })]);
  const guest = h.guestAgent(net.identity);
  for (const method of ['GET', 'DELETE', 'OPTIONS', 'HEAD']) {
    const inner = `POST /smuggled-${method} HTTP/1.1\r\nHost: evil.test\r\nContent-Length: 600\r\n\r\n`;
    const first = await h.send(guest, method, `/carrier-${method}`, ['Host', `api.test:${HTTP}`, 'Transfer-Encoding', 'chunked'], inner);
    assert.equal(first.status, 200, method);
    const next = await h.send(guest, 'GET', `/next-${method}`, ['Host', `api.test:${HTTP}`]);
    assert.equal(next.status, 200, `${method}: the next request is answered on its own`);
    assert.ok(!seenPaths().includes(`/smuggled-${method}`), `${method}: the hidden request never reached the upstream as a request`);
    assert.equal(h.up.hits(`/carrier-${method}`)[0]?.body, inner, `${method}: it arrived as the body`);
    assert.match(h.up.received, new RegExp(`${method} /carrier-${method} HTTP/1\\.1\\r\\n(?:[^\\r]+\\r\\n)*Transfer-Encoding: chunked\\r\\n`), `${method}: framed explicitly`);
  }
  assert.ok(h.up.seen.every((s) => !s.body.includes(SECRET)), 'no secret inside any body');
  guest.destroy();
});

test('a body with a transfer coding that cannot be framed again is refused, and reaches nothing', async () => {
  const net = h.runtime('rt-te', '127.0.0.3', ['api.test']);
  const guest = h.guestAgent(net.identity);
  const sock = await rawExchange(net.identity, `POST /gzip-chunked HTTP/1.1\r\nHost: api.test:${HTTP}\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n`);
  assert.match(sock, /^HTTP\/1\.1 400 /);
  assert.equal(h.up.hits('/gzip-chunked').length, 0);
  guest.destroy();
});

/** Writes raw bytes as the guest at `identity` and returns everything it reads back until the proxy closes or 2 s pass. */
function rawExchange(identity: string, bytes: string): Promise<string> {
  return exchange(connect({ host: '127.0.0.1', port: h.proxyPort, localAddress: identity }), bytes);
}

test('exactly one Host goes upstream, the decided one; duplicate Host is refused and audited', async () => {
  const net = h.runtime('rt-host', '127.0.0.4', ['api.test']);
  const guest = h.guestAgent(net.identity);
  const r = await h.send(guest, 'GET', '/conn-host', ['Host', `API.Test.:${HTTP}`, 'Connection', 'keep-alive, host, content-length, transfer-encoding']);
  assert.equal(r.status, 200);
  assert.deepEqual(hostHeaders(h.up.hits('/conn-host')[0]!.rawHeaders), [`api.test:${HTTP}`]);
  const dup = await rawExchange(net.identity, `GET /dup-host HTTP/1.1\r\nHost: api.test:${HTTP}\r\nHost: other.test\r\n\r\n`);
  assert.match(dup, /^HTTP\/1\.1 400 /);
  assert.equal(h.up.hits('/dup-host').length, 0);
  const a = h.audits.find((x) => x.detail.path === '/dup-host');
  assert.equal(a?.detail.action, 'deny');
  assert.equal(a?.detail.reason, 'bad_request');
  assert.equal(a?.detail.status, 400);
  guest.destroy();
});

test('injected values never come back in response headers, in any spelling; TRACE and TRACK are refused', async () => {
  const net = h.runtime('rt-redact', '127.0.0.5', ['api.test'], [h.rule('r-redact', SECRET, { headerName: 'X-Api-Key', valueFormat: 'Token ${credential}', paramName: 'api_key' })]);
  const guest = h.guestAgent(net.identity);
  const r = await h.send(guest, 'GET', '/reflect?a=1', ['Host', `api.test:${HTTP}`]);
  assert.equal(r.status, 301);
  const sent = h.up.hits('/reflect')[0]!;
  assert.equal(new URLSearchParams(sent.url.split('?')[1]).get('api_key'), SECRET, 'the upstream got the parameter');
  const shown = r.rawHeaders.join('\n');
  for (const spelling of [SECRET, encodeURIComponent(SECRET), new URLSearchParams({ k: SECRET }).toString().slice(2)]) assert.ok(!shown.includes(spelling), `${spelling} in ${shown}`);
  assert.equal(r.headers.location, '/reflected/reflect?a=1&api_key=vessel-redacted');
  assert.equal(r.headers['x-reflect'], 'vessel-redacted');
  const t = await h.send(guest, 'TRACE', '/trace', ['Host', `api.test:${HTTP}`]);
  assert.equal(t.status, 405);
  assert.equal(h.up.hits('/trace').length, 0);
  const a = h.audits.find((x) => x.detail.path === '/trace');
  assert.equal(a?.detail.action, 'deny');
  assert.equal(a?.detail.reason, 'method_not_allowed');
  // Node's parser knows no TRACK: it is refused before the forwarder sees it.
  assert.match(await rawExchange(net.identity, `TRACK /track HTTP/1.1\r\nHost: api.test:${HTTP}\r\n\r\n`), /^HTTP\/1\.1 400 /);
  assert.equal(h.up.hits('/track').length, 0);
  guest.destroy();
});

test('a request target a URL parser rejects is forwarded with its parameter, not left hanging', async () => {
  const net = h.runtime('rt-target', '127.0.0.6', ['api.test'], [h.rule('r-target', 'plain-secret', { headerName: 'X-Api-Key', paramName: 'key' })]);
  const guest = h.guestAgent(net.identity);
  const r = await h.send(guest, 'GET', '//[/x?key=guest&b=%20', ['Host', `api.test:${HTTP}`]);
  assert.equal(r.status, 200);
  assert.equal(h.up.hits('//[/x')[0]?.url, '//[/x?b=%20&key=plain-secret', 'the guest value replaced, the rest kept byte for byte');
  guest.destroy();
});

/** A keep-alive HTTP connection from the guest at `identity`, answered once: resolves with the socket. */
function openHttp(identity: string, path: string): Promise<Socket | null> {
  return new Promise((resolve) => {
    const s = connect({ host: '127.0.0.1', port: h.proxyPort, localAddress: identity });
    s.on('error', () => resolve(null));
    s.on('close', () => resolve(null));
    s.once('data', () => resolve(s));
    s.write(`GET ${path} HTTP/1.1\r\nHost: api.test:${HTTP}\r\n\r\n`);
  });
}

test('connections over the runtime or tenant cap are reset and audited; closing one makes room', async () => {
  const a = h.runtime('rt-cap-a', '127.0.0.7', ['api.test'], [], 'tenant-cap');
  const b = h.runtime('rt-cap-b', '127.0.0.8', ['api.test'], [], 'tenant-cap');
  const held: Socket[] = [];
  for (let i = 0; i < 3; i++) held.push((await openHttp(a.identity, `/cap-a-${i}`))!);
  assert.ok(held.every((s) => s !== null));
  assert.equal(await openHttp(a.identity, '/cap-a-over'), null, 'the runtime cap');
  const denied = h.audits.find((x) => x.runtimeId === a.id && x.detail.reason === 'connection_limit');
  assert.equal(denied?.kind, 'tcp_connection');
  assert.equal(denied?.detail.action, 'deny');
  const fromB = await openHttp(b.identity, '/cap-b-0');
  assert.ok(fromB !== null, 'another runtime of the tenant, under the tenant cap');
  assert.equal(await openHttp(b.identity, '/cap-b-over'), null, 'the tenant cap');
  held.pop()!.destroy();
  await waitFor(() => h.limits.count(a.id) === 2);
  const again = await openHttp(b.identity, '/cap-b-again');
  assert.ok(again !== null, 'room again once a connection closed');
  for (const s of [...held, fromB!, again!]) s.destroy();
  await waitFor(() => h.limits.count(a.id) === 0 && h.limits.count(b.id) === 0);
});

async function waitFor(condition: () => boolean, ms = 3000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 20));
  }
}

test('a spliced connection counts until its relay ends; a detach closes it, and every keep-alive connection', async () => {
  const net = h.runtime('rt-detach', '127.0.0.9', ['api.test', 'raw.test']);
  const other = h.runtime('rt-stays', '127.0.0.10', ['raw.test']);
  const tcp = h.up.port(h.up.tcp);
  net.pin('198.18.0.9', 'raw.test', '127.0.0.1');
  other.pin('198.18.0.9', 'raw.test', '127.0.0.1');
  const raw = async (identity: string) => {
    h.destination = { address: '198.18.0.9', port: tcp };
    const s = connect({ host: '127.0.0.1', port: h.proxyPort, localAddress: identity });
    await new Promise((r) => s.once('connect', r));
    // Silent at first, as a server-first protocol is: the proxy splices it after SILENT_MS.
    await new Promise((r) => setTimeout(r, 400));
    s.write('ping');
    await new Promise((r) => s.once('data', r));
    return s;
  };
  const spliced = await raw(net.identity);
  const survivor = await raw(other.identity);
  h.destination = { address: '127.0.0.1', port: HTTP };
  const keptAlive = (await openHttp(net.identity, '/detach-keepalive'))!;
  assert.equal(h.limits.count(net.id), 2, 'the spliced and the HTTP connection');
  spliced.on('error', () => undefined);
  keptAlive.on('error', () => undefined);
  await h.registry.remove(net.id);
  await waitFor(() => spliced.destroyed, 2000).catch(() => assert.fail('the spliced connection is still open'));
  await waitFor(() => keptAlive.destroyed, 2000).catch(() => assert.fail('the keep-alive connection is still open'));
  await waitFor(() => h.limits.count(net.id) === 0);
  survivor.write('still');
  assert.match(String(await new Promise((r) => survivor.once('data', r))), /echo:still/, "another runtime's relay is untouched");
  survivor.destroy();
  await waitFor(() => h.limits.count(other.id) === 0);
});

/** Like rawExchange, over TLS to the proxy with SNI `servername` (the service CA is not checked). */
function tlsExchange(identity: string, servername: string, bytes: string): Promise<string> {
  const socket = connect({ host: '127.0.0.1', port: h.proxyPort, localAddress: identity });
  return exchange(tlsConnect({ socket, servername, rejectUnauthorized: false }), bytes);
}

test('an upstream status line or header the gateway cannot write is a 502 for that request alone, plain and intercepted', async () => {
  const net = h.runtime('rt-badstatus', '127.0.0.11', ['api.test'], [h.rule('r-badstatus', 'status-secret', { headerName: 'X-Api-Key' })]);
  for (const [path, [response]] of Object.entries(BAD_RESPONSES)) h.up.scripts.set(path, response);
  for (const [scheme, server] of [['http', h.up.scripted], ['https', h.up.scriptedTls]] as const) {
    const port = h.up.port(server);
    for (const [path, [, statusLine]] of Object.entries(BAD_RESPONSES)) {
      h.destination = { address: '127.0.0.1', port };
      const request = `GET ${path} HTTP/1.1\r\nHost: api.test:${port}\r\nConnection: close\r\n\r\n`;
      const got = scheme === 'http' ? await rawExchange(net.identity, request) : await tlsExchange(net.identity, 'api.test', request);
      assert.match(got, statusLine, `${scheme} ${path}: ${JSON.stringify(got.slice(0, 60))}`);
    }
    const audited = h.audits.find((a) => a.runtimeId === net.id && a.detail.path === '/bad-code' && a.detail.status === 502);
    assert.equal(audited?.detail.reason, 'upstream_error: bad_response', scheme);
    h.audits.splice(0, h.audits.length, ...h.audits.filter((a) => a !== audited));
  }
  // Still serving.
  h.destination = { address: '127.0.0.1', port: HTTP };
  const guest = h.guestAgent(net.identity);
  assert.equal((await h.send(guest, 'GET', '/after-bad-status', ['Host', `api.test:${HTTP}`])).status, 200);
  guest.destroy();
});

test('a ClientHello split across records is decided on its whole name, never on the part in the first record', async () => {
  const net = h.runtime('rt-split-sni', '127.0.0.12', ['api.test']);
  h.destination = { address: '127.0.0.1', port: h.up.port(h.up.tcp) };
  const name = 'api.test.attacker.test';
  const hello = await clientHello(name);
  // The first record ends right after `api.test`, which is all the first record says.
  const split = splitRecords(hello, hello.subarray(5).indexOf('api.test') + 'api.test'.length);
  // The same hello claiming one more byte of name than the list holds.
  const overlong = Buffer.from(hello);
  const at = 5 + hello.subarray(5).indexOf(name) - 2;
  overlong.writeUInt16BE(overlong.readUInt16BE(at) + 5, at);
  for (const bytes of [split, overlong]) {
    const s = connect({ host: '127.0.0.1', port: h.proxyPort, localAddress: net.identity });
    let echoed = '';
    s.on('data', (d) => (echoed += d.toString()));
    s.on('error', () => undefined);
    s.setTimeout(2000, () => s.destroy());
    s.write(bytes);
    await new Promise((r) => s.once('close', r));
    assert.equal(echoed, '', 'nothing was spliced');
  }
  const audits = h.audits.filter((a) => a.runtimeId === net.id);
  assert.deepEqual(audits.map((a) => [a.detail.action, a.detail.host, a.detail.reason]), [['deny', name, 'host_not_allowed'], ['deny', null, 'bad_request']]);
  h.destination = { address: '127.0.0.1', port: HTTP };
});

test('a guest that trickles a request head, a TLS handshake or a body is closed, upstream too, and gets its places under the caps back', async () => {
  const q = new EgressHarness({ perRuntime: 3, perTenant: 4 }, { headersTimeoutMs: 300, bodyIdleTimeoutMs: 200 });
  await q.start();
  try {
    const net = q.runtime('rt-slow', '127.0.0.13', ['api.test'], [q.rule('r-slow', 'slow-secret', { headerName: 'X-Api-Key' })]);
    const upstream = q.up.port(q.up.http);
    q.destination = { address: '127.0.0.1', port: upstream };
    const open = (bytes: string | Buffer) => {
      const s = connect({ host: '127.0.0.1', port: q.proxyPort, localAddress: net.identity });
      s.on('error', () => undefined);
      // Read (and drop) what comes back, so that the close is seen.
      s.resume();
      s.write(bytes);
      return s;
    };
    const head = open(`GET /slow-head HTTP/1.1\r\nHost: api.test:${upstream}\r\nX-Slow: a`);
    // Intercepted (a rule names api.test), and the guest never finishes its handshake.
    const handshake = open(await clientHello('api.test'));
    const body = open(`POST /slow-body HTTP/1.1\r\nHost: api.test:${upstream}\r\nContent-Length: 1000000000\r\n\r\n`);
    const drip = setInterval(() => body.destroyed || body.write('x'), 50);
    const upstreamConnections = () => new Promise<number>((r) => q.up.http.getConnections((_err, n) => r(n)));
    try {
      await waitFor(() => q.up.hits('/slow-body').length === 1).catch(() => assert.fail('the body\'s request never reached the upstream'));
      for (const [name, s] of Object.entries({ head, handshake, body })) await waitFor(() => s.destroyed, 5000).catch(() => assert.fail(`the slow ${name} is still open`));
      await waitFor(() => q.limits.count(net.id) === 0).catch(() => assert.fail(`${q.limits.count(net.id)} places still held`));
      let left = await upstreamConnections();
      for (let i = 0; left > 0 && i < 100; i++) left = await new Promise((r) => setTimeout(r, 20)).then(upstreamConnections);
      assert.equal(left, 0, 'the upstream request was closed with it');
      const guest = q.guestAgent(net.identity);
      assert.equal((await q.send(guest, 'GET', '/after-slow', ['Host', `api.test:${upstream}`])).status, 200, 'served again');
      guest.destroy();
    } finally {
      clearInterval(drip);
      for (const s of [head, handshake, body]) s.destroy();
    }
  } finally {
    await q.close();
  }
});

/** The native addon socket-ops.ts loads (the same module object), to count its calls. */
const nativeOps = createRequire(import.meta.url)('../../../build/Release/socket_ops.node') as { peek: (...args: unknown[]) => unknown };

/** A connection on loopback: the accepted end paused, as the gateway's listeners accept them. */
async function acceptedPair(): Promise<{ accepted: Socket; client: Socket }> {
  return new Promise((resolve) => {
    const server = createServer({ pauseOnConnect: true }, (accepted) => {
      server.close();
      accepted.on('error', () => undefined);
      resolve({ accepted, client });
    });
    let client: Socket;
    server.listen(0, '127.0.0.1', () => {
      client = connect((server.address() as AddressInfo).port, '127.0.0.1');
      client.on('error', () => undefined);
    });
  });
}

test('sniffing looks again only when bytes arrive: a silent connection is peeked twice, not every 16 ms', async () => {
  const peek = nativeOps.peek;
  let peeks = 0;
  nativeOps.peek = (...args: unknown[]) => {
    peeks++;
    return peek(...args);
  };
  const pairs: Array<{ accepted: Socket; client: Socket }> = [];
  const pair = async () => {
    const p = await acceptedPair();
    pairs.push(p);
    return p;
  };
  try {
    const silent = await pair();
    peeks = 0;
    assert.deepEqual(await sniffSocket(silent.accepted, 1000), { kind: 'silent' });
    // Polling every 16 ms would be ~60; the bound leaves room for a wake-up a loaded host adds.
    assert.ok(peeks <= 4, `${peeks} peeks for a second of silence`);

    // A start and then the end of the stream: decided on the close, not after the 5 s deadline of peeking.
    const cut = await pair();
    peeks = 0;
    cut.client.end('GET /cut');
    assert.deepEqual(await sniffSocket(cut.accepted, 60_000), { kind: 'other' });
    assert.ok(peeks <= 5, `${peeks} peeks for a first line cut short`);

    // Each piece wakes it: a ClientHello in three writes is read whole.
    const pieces = await pair();
    const hello = await clientHello('api.test');
    const sniffed = sniffSocket(pieces.accepted, 1000);
    for (let i = 0; i < 3; i++) {
      pieces.client.write(hello.subarray(Math.floor((i * hello.length) / 3), Math.floor(((i + 1) * hello.length) / 3)));
      await new Promise((r) => setTimeout(r, 30));
    }
    assert.deepEqual(await sniffed, { kind: 'tls', sni: 'api.test' });

    // Closed while it waits: the wait lets go of its descriptor, so the peer sees the close.
    const closed = await pair();
    const waiting = sniffSocket(closed.accepted, 60_000);
    const peerSawClose = new Promise((r) => closed.client.once('close', r));
    closed.accepted.destroy();
    assert.deepEqual(await waiting, { kind: 'other' });
    await peerSawClose;
  } finally {
    nativeOps.peek = peek;
    for (const p of pairs) [p.accepted, p.client].forEach((s) => s.destroy());
  }
});

test('every audit the gateway recorded in these tests has the shape the API documents for its kind', () => {
  // Formats aside: the rules of these tests have made-up ids, where the service's are UUIDs.
  const ajv = new Ajv({ strict: false, allErrors: true, validateFormats: false });
  for (const schema of SHARED_SCHEMAS) ajv.addSchema(schema);
  const documented = { tcp_connection: 'TcpConnectionAudit', http_request: 'HttpRequestAudit', icmp_drop: 'IcmpDropAudit' } as const;
  const kinds = new Set(h.audits.map((a) => a.kind));
  assert.deepEqual([...kinds].sort(), ['http_request', 'tcp_connection'], 'ICMP drops are counted by nftables, on a real gateway');
  for (const a of h.audits) {
    const validate = ajv.getSchema(documented[a.kind])!;
    assert.ok(validate(a.detail), `${a.kind} ${JSON.stringify(a.detail)}: ${ajv.errorsText(validate.errors)}`);
  }
});
