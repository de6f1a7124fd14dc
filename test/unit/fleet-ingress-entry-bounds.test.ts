/**
 * What one client can make an API node's ingress entry do to a VM host: a request is sent to the
 * host once, however its client leaves; pipelined requests are taken up a bounded number at a
 * time; an upgrade carries no body. The host here is a plain HTTP server behind the entry's PROXY
 * header (parsed and dropped), counting what reaches it.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { IngressEntry, MAX_PENDING_PER_CLIENT } from '../../src/cluster/ingress-entry.js';
import { FleetKeys } from '../../src/cluster/fleet-keys.js';
import { parseProxyHeader } from '../../src/net/proxy-header.js';
import type { NodeDirectory } from '../../src/core/node-directory.js';
import type { Store } from '../../src/core/ports.js';
import { quietLog } from '../support/egress-harness.js';
import { freePort } from '../support/service.js';

const RUNTIME = randomUUID();
const NODE = 'host-1';
const GUEST_PORT = 8000;
const HOST = `${GUEST_PORT}-${RUNTIME}.localhost`;
/** Requests that reached the host, as `METHOD path`. */
const seen: string[] = [];
/** Answers the host holds back (paths under /slow), released at the end. */
const held: ServerResponse[] = [];
let lookups = 0;
let hostTcp: Server;
let entry: IngressEntry;
let ENTRY_PORT = 0;

before(async () => {
  const http = createHttpServer((req: IncomingMessage, res: ServerResponse) => {
    seen.push(`${req.method} ${req.url}`);
    req.resume();
    if (req.url?.startsWith('/slow')) held.push(res);
    else res.end('fast');
  });
  // The host's side of a relayed connection: its PROXY header, then HTTP.
  hostTcp = createServer((socket: Socket) => {
    socket.on('error', () => undefined);
    let buf = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      buf = Buffer.concat([buf, chunk]);
      const parsed = parseProxyHeader(buf);
      if (parsed.kind === 'incomplete') return;
      socket.off('data', onData);
      socket.pause();
      if (parsed.kind !== 'ok') return void socket.destroy();
      socket.unshift(buf.subarray(parsed.length));
      http.emit('connection', socket);
      socket.resume();
    };
    socket.on('data', onData);
  });
  await new Promise<void>((r) => hostTcp.listen(0, '127.0.0.1', () => r()));
  const hostPort = (hostTcp.address() as AddressInfo).port;
  const store = {
    runtimes: {
      findById: async (id: string) => {
        lookups++;
        return id === RUNTIME ? { id, node: NODE, ingressSpecs: [{ runtime_port: GUEST_PORT, protocol: 'http' }] } : undefined;
      },
    },
  } as unknown as Store;
  const nodes = { find: async (name: string) => (name === NODE ? { name, alive: true, ingressAddress: `127.0.0.1:${hostPort}` } : undefined) } as unknown as NodeDirectory;
  entry = new IngressEntry({ store, nodes, domain: 'localhost', keys: new FleetKeys('e'.repeat(40)), fleetCa: () => Promise.reject(new Error('no https here')), trustedProxies: [], log: quietLog as never });
  ENTRY_PORT = await freePort();
  await entry.listen('127.0.0.1', ENTRY_PORT);
});

after(async () => {
  for (const res of held) res.destroy();
  await entry.close();
  hostTcp.close();
});

async function until(condition: () => boolean, ms = 10_000): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!condition() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  return condition();
}

/** A client connection: what it reads, and whether it closed. */
function client(): { socket: Socket; read: () => string; closed: () => boolean } {
  const socket = connect({ host: '127.0.0.1', port: ENTRY_PORT });
  let text = '';
  let closed = false;
  socket.on('data', (d: Buffer) => (text += d.toString('latin1')));
  socket.on('error', () => undefined);
  socket.on('close', () => (closed = true));
  return { socket, read: () => text, closed: () => closed };
}

const request = (method: string, path: string, extra = ''): string => `${method} ${path} HTTP/1.1\r\nHost: ${HOST}\r\n${extra}\r\n`;

test('a request on a kept connection reaches the host once when its client leaves before the answer', async () => {
  const c = client();
  c.socket.write(request('GET', '/first'));
  assert.ok(await until(() => c.read().includes('fast')), 'the first request was answered');
  c.socket.write(request('POST', '/slow-post'));
  assert.ok(await until(() => seen.includes('POST /slow-post')), 'the second reached the host on the kept connection');
  c.socket.destroy();
  // What a resend would have sent arrives within milliseconds; give it far longer.
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual(seen.filter((s) => s === 'POST /slow-post'), ['POST /slow-post']);
});

test('pipelined requests are taken up a bounded number at a time; a flood in one write closes its connection', async () => {
  const before = lookups;
  const c = client();
  c.socket.write(Array.from({ length: 400 }, (_, i) => request('GET', `/slow-${i}`)).join(''));
  assert.ok(await until(() => c.closed()), 'the connection was closed');
  assert.ok(lookups - before <= 4 * MAX_PENDING_PER_CLIENT, `the entry looked up ${lookups - before} requests, not 400`);
});

test('an upgrade that announces a body is refused with 400, and nothing reaches the host', async () => {
  const count = seen.length;
  const c = client();
  c.socket.write(request('GET', '/ws', 'Connection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 5\r\n') + 'hello');
  assert.ok(await until(() => c.closed()));
  assert.match(c.read(), /^HTTP\/1\.1 400 /);
  assert.equal(seen.length, count);
});
