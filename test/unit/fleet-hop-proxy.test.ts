/**
 * The hop's streaming (src/cluster/hop-proxy.ts), between a real front server (the API node's
 * part) and a real host server: bodies keep their framing, so nothing a caller sends is read by
 * the host as a request of its own, and a caller that leaves cuts the hop.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { connect, type AddressInfo } from 'node:net';
import { forwardRequest } from '../../src/cluster/hop-proxy.js';
import { verifyHop } from '../../src/cluster/hop.js';
import { hostKey } from '../../src/cluster/fleet-keys.js';
import { plainHopClient } from '../support/hop-client.js';
import type { Principal } from '../../src/core/types.js';

const SECRET = 's'.repeat(40);
const principal: Principal = { tokenId: 't', tenantId: 'acme', scopes: new Set(['admin']) };

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; port: number }> {
  const server = createServer(handler);
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  return { server, port: (server.address() as AddressInfo).port };
}

/** The front: every request goes on to the host, as the forwarder sends it. */
const front = (hostPort: number) =>
  listen((req, res) => {
    let n = 0;
    forwardRequest(plainHopClient(SECRET), { name: 'h', internalUrl: `http://127.0.0.1:${hostPort}` }, req, res, { principal, requestId: `r${++n}`, clientIp: '127.0.0.1' }).then(
      (stream) => stream(),
      () => res.writeHead(503).end(),
    );
  });

function raw(port: number, bytes: string): Promise<string> {
  return new Promise((resolve, reject) => {
    // Written, not ended: a client's half-close aborts its request in Node's server (httpAllowHalfOpen).
    const s = connect(port, '127.0.0.1', () => s.write(bytes));
    let got = '';
    s.on('data', (d) => (got += d.toString()));
    s.on('end', () => resolve(got));
    s.on('error', reject);
  });
}

test('a chunked body on a GET reaches the host framed as chunked: a request hidden in it stays body', async () => {
  const seen: Array<{ method: string; url: string; body: string; hop: boolean }> = [];
  const host = await listen((req, res) => {
    // Read as a VM host reads it: through the hop's check of its signed body.
    const hop = verifyHop(hostKey(SECRET, 'h'), req.headers, { method: req.method!, url: req.url!, requestId: String(req.headers['x-request-id']), node: 'h' });
    if (typeof hop === 'string') return void res.writeHead(401).end(hop);
    let body = '';
    const checked = hop.checkBody(req);
    checked.on('data', (d) => (body += d));
    checked.on('error', () => res.writeHead(401).end());
    checked.on('end', () => {
      seen.push({ method: req.method!, url: req.url!, body, hop: true });
      res.end('ok');
    });
  });
  const api = await front(host.port);
  try {
    const hidden = 'GET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n';
    const chunk = `${hidden.length.toString(16)}\r\n${hidden}\r\n0\r\n\r\n`;
    await raw(api.port, `GET /first HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n${chunk}`);
    // A second request on the host's pooled connection: it must arrive as itself, signed.
    await raw(api.port, 'POST /second HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello');
    await raw(api.port, 'DELETE /third HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n');
    assert.deepEqual(seen, [
      { method: 'GET', url: '/first', body: hidden, hop: true },
      { method: 'POST', url: '/second', body: 'hello', hop: true },
      { method: 'DELETE', url: '/third', body: '', hop: true },
    ]);
  } finally {
    api.server.close();
    host.server.close();
    api.server.closeAllConnections();
    host.server.closeAllConnections();
  }
});

test('a caller that leaves before the host answers, or mid-stream, cuts the hop', async () => {
  const closed: string[] = [];
  const host = await listen((req, res) => {
    res.once('close', () => closed.push(req.url!));
    // /late answers never; /stream answers, then keeps the stream open.
    if (req.url === '/stream') {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('event: start\n\n');
    }
  });
  const api = await front(host.port);
  try {
    for (const path of ['/late', '/stream']) {
      const s = connect(api.port, '127.0.0.1', () => s.write(`GET ${path} HTTP/1.1\r\nHost: a\r\n\r\n`));
      if (path === '/stream') await once(s, 'data');
      else await new Promise((r) => setTimeout(r, 100));
      s.destroy();
    }
    const deadline = Date.now() + 5000;
    while (closed.length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(closed.sort(), ['/late', '/stream']);
  } finally {
    api.server.close();
    host.server.close();
    api.server.closeAllConnections();
    host.server.closeAllConnections();
  }
});
