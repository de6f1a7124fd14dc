/**
 * What one client can make an API node's ingress entry do to a VM host: a request is sent to the
 * host once, however its client leaves; pipelined requests are taken up a bounded number at a
 * time; an upgrade carries no body. The host is test/support/fake-host-ingress.ts, counting what
 * reaches it.
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { connect, type Socket } from 'node:net';
import { IngressEntry, MAX_PENDING_PER_CLIENT } from '../../src/cluster/ingress-entry.js';
import { FleetKeys } from '../../src/cluster/fleet-keys.js';
import type { NodeDirectory } from '../../src/core/node-directory.js';
import type { Store } from '../../src/core/ports.js';
import { quietLog } from '../support/egress-harness.js';
import { fakeHostIngress, type FakeHostIngress } from '../support/fake-host-ingress.js';
import { freePort } from '../support/service.js';

const RUNTIME = randomUUID();
const NODE = 'host-1';
const GUEST_PORT = 8000;
const HOST = `${GUEST_PORT}-${RUNTIME}.localhost`;
let host: FakeHostIngress;
let lookups = 0;
let entry: IngressEntry;
let ENTRY_PORT = 0;

before(async () => {
  host = await fakeHostIngress();
  const store = {
    runtimes: {
      findById: async (id: string) => {
        lookups++;
        return id === RUNTIME ? { id, node: NODE, ingressSpecs: [{ runtime_port: GUEST_PORT, protocol: 'http' }] } : undefined;
      },
    },
  } as unknown as Store;
  const nodes = { find: async (name: string) => (name === NODE ? { name, alive: true, ingressAddress: host.address } : undefined) } as unknown as NodeDirectory;
  entry = new IngressEntry({ store, nodes, domain: 'localhost', keys: new FleetKeys('e'.repeat(40)), fleetCa: () => Promise.reject(new Error('no https here')), trustedProxies: [], log: quietLog as never });
  ENTRY_PORT = await freePort();
  await entry.listen('127.0.0.1', ENTRY_PORT);
});

after(async () => {
  await entry.close();
  host.close();
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
  assert.ok(await until(() => host.seen.includes('POST /slow-post')), 'the second reached the host on the kept connection');
  c.socket.destroy();
  // What a resend would have sent arrives within milliseconds; give it far longer.
  await new Promise((r) => setTimeout(r, 500));
  assert.deepEqual(host.seen.filter((s) => s === 'POST /slow-post'), ['POST /slow-post']);
});

test('pipelined requests are taken up a bounded number at a time; a flood in one write closes its connection', async () => {
  const before = lookups;
  const c = client();
  c.socket.write(Array.from({ length: 400 }, (_, i) => request('GET', `/slow-${i}`)).join(''));
  assert.ok(await until(() => c.closed()), 'the connection was closed');
  assert.ok(lookups - before <= 4 * MAX_PENDING_PER_CLIENT, `the entry looked up ${lookups - before} requests, not 400`);
});

test('an upgrade that announces a body is refused with 400, and nothing reaches the host', async () => {
  const count = host.seen.length;
  const c = client();
  c.socket.write(request('GET', '/ws', 'Connection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 5\r\n') + 'hello');
  assert.ok(await until(() => c.closed()));
  assert.match(c.read(), /^HTTP\/1\.1 400 /);
  assert.equal(host.seen.length, count);
});
