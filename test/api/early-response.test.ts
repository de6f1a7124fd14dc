/**
 * A refusal sent while the client is still sending its body (over a limit, refused partway or
 * from its Content-Length; a bad token on an upload) reaches the client whole: the server reads
 * and discards the rest before it closes (src/api/linger.ts), within bounds. Over real sockets,
 * each client sending part of its body, waiting for the response's head, then the rest.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import net from 'node:net';
import { Readable } from 'node:stream';
import type { AddressInfo } from 'node:net';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';
import { FakeDriver } from '../support/fake-driver.js';
import { capped } from '../../src/vm/guest-files.js';
import { LINGER_LIMITS } from '../../src/api/linger.js';

/** The fake driver with the real driver's cap on a written file (which destroys the body at it). */
class CappingDriver extends FakeDriver {
  override async writeFile(id: string, path: string, body: Readable, maxBytes = Infinity): Promise<number> {
    const chunks: Buffer[] = [];
    for await (const chunk of capped(body, maxBytes)) chunks.push(chunk);
    return super.writeFile(id, path, Readable.from(chunks), maxBytes);
  }
}

const MIB = 1024 * 1024;
const BODY = Math.round(1.4 * MIB);
let h: ApiHarness;
let port: number;

before(async () => {
  // The harness's cap on a file is 1 MiB, as is the JSON body limit.
  h = await apiHarness({ driver: new CappingDriver() });
  assert.equal((await h.call('POST', '/v1/runtimes', { display_name: 'up' })).status, 201);
  await h.app.listen({ host: '127.0.0.1', port: 0 });
  port = (h.app.server.address() as AddressInfo).port;
});
after(() => h.close());

interface Outcome {
  status: number;
  body: string;
  connection: string | undefined;
  /** Any error the client saw, on its request or its response (EPIPE, ECONNRESET, …). */
  errors: string[];
}

/**
 * node:http: `first` bytes of a `total`-byte body, then, once the response's head is in, the rest
 * (chunked when total is undefined). Settles once the connection has closed.
 */
function send(method: string, path: string, first: number, headers: Record<string, string>, total: number | undefined = BODY): Promise<Outcome> {
  return new Promise((resolve) => {
    const errors: string[] = [];
    const length = total === undefined ? {} : { 'content-length': String(total) };
    const req = http.request({ host: '127.0.0.1', port, method, path, agent: false, headers: { ...length, ...headers } });
    const chunks: Buffer[] = [];
    let res: http.IncomingMessage | undefined;
    const settle = () => resolve({ status: res?.statusCode ?? 0, body: Buffer.concat(chunks).toString(), connection: res?.headers.connection, errors });
    req.on('error', (err: NodeJS.ErrnoException) => errors.push(err.code ?? err.message));
    // The connection's fate is part of the outcome: settled once it closed (and the response with it).
    req.on('close', () => (res === undefined || res.destroyed ? settle() : res.once('close', settle)));
    req.write(Buffer.alloc(first, 0x20));
    req.on('response', (r) => {
      res = r;
      req.end(Buffer.alloc((total ?? first + 300 * 1024) - first, 0x20));
      r.on('data', (c: Buffer) => chunks.push(c));
      r.on('error', (err: NodeJS.ErrnoException) => errors.push(err.code ?? err.message));
    });
  });
}

const envelope = (o: Outcome) => JSON.parse(o.body) as { error: { code: string; message: string } };

test('a JSON body refused from its Content-Length: the client gets the 413 envelope, not EPIPE', async () => {
  const o = await send('POST', '/v1/runtimes', 64 * 1024, { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' });
  assert.deepEqual(o.errors, []);
  assert.equal(o.status, 413);
  assert.equal(o.connection, 'close');
  assert.deepEqual(envelope(o), { error: { code: 'invalid_argument', message: 'request body is too large' } });
});

test('a file refused partway, at its cap: the client gets the 413 envelope, not ECONNRESET', async () => {
  // Past the 1 MiB cap, so the handler refuses it before the rest is sent.
  const o = await send('PUT', '/v1/runtimes/up/files?path=/tmp/big', MIB + 100 * 1024, { authorization: `Bearer ${h.admin}`, 'content-type': 'application/octet-stream' });
  assert.deepEqual(o.errors, []);
  assert.equal(o.status, 413);
  assert.equal(envelope(o).error.code, 'invalid_argument');
  assert.match(envelope(o).error.message, /larger than the limit/);
});

test('an upload with a bad token: the 401 envelope, then the connection closes cleanly', async () => {
  const o = await send('PUT', '/v1/runtimes/up/files?path=/tmp/x', 64 * 1024, { authorization: 'Bearer nope', 'content-type': 'application/octet-stream' });
  assert.deepEqual(o.errors, []);
  assert.equal(o.status, 401);
  assert.equal(envelope(o).error.code, 'unauthenticated');
});

test('a JSON body over the limit without a Content-Length (chunked) gets its 413 envelope', async () => {
  const o = await send('POST', '/v1/runtimes', MIB + 64 * 1024, { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json' }, undefined);
  assert.deepEqual(o.errors, []);
  assert.equal(o.status, 413);
  assert.equal(envelope(o).error.code, 'invalid_argument');
});

test('fetch (undici) streaming a body over the limit gets the 413 envelope', async () => {
  const first = 64 * 1024;
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const body = new ReadableStream<Uint8Array>({ start: (c) => void (controller = c, c.enqueue(new Uint8Array(first).fill(0x20))) });
  const res = await fetch(`http://127.0.0.1:${port}/v1/runtimes`, {
    method: 'POST',
    body,
    duplex: 'half',
    headers: { authorization: `Bearer ${h.admin}`, 'content-type': 'application/json', 'content-length': String(BODY) },
  } as RequestInit);
  // The response's head came first; the rest of the body follows it.
  controller.enqueue(new Uint8Array(BODY - first).fill(0x20));
  controller.close();
  assert.equal(res.status, 413);
  assert.equal(res.headers.get('connection'), 'close');
  assert.deepEqual(await res.json(), { error: { code: 'invalid_argument', message: 'request body is too large' } });
});

/** A raw client that sends a request head, then body chunks until the server closes; returns what it read and the bytes it got out. */
function floodUntilClosed(stopAfter?: number): Promise<{ response: string; sent: number }> {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    let response = '';
    let sent = 0;
    let headSeen = false;
    const chunk = Buffer.alloc(64 * 1024, 0x20);
    const pump = (): void => {
      while (!socket.destroyed && (stopAfter === undefined || sent < stopAfter)) {
        sent += chunk.length;
        if (!socket.write(chunk)) return void socket.once('drain', pump);
      }
    };
    socket.on('data', (d: Buffer) => {
      response += d.toString();
      // Keep sending only once the refusal has come: the server has answered, and lingers.
      if (!headSeen && response.includes('\r\n\r\n')) {
        headSeen = true;
        pump();
      }
    });
    socket.on('error', () => undefined);
    socket.on('close', () => resolve({ response, sent }));
    socket.write(`POST /v1/runtimes HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${h.admin}\r\ncontent-type: application/json\r\ncontent-length: ${1024 * MIB}\r\n\r\n`);
  });
}

test('a client that never stops sending is cut at the bound, its refusal delivered first', async () => {
  const { response, sent } = await floodUntilClosed();
  assert.match(response, /^HTTP\/1\.1 413 /);
  assert.match(response, /connection: close/i);
  const body = response.slice(response.indexOf('\r\n\r\n') + 4);
  assert.deepEqual(JSON.parse(body), { error: { code: 'invalid_argument', message: 'request body is too large' } });
  // Read past the refusal (it lingered), and cut long before its gigabyte: at the bound, give or
  // take what the sockets' buffers held.
  assert.ok(sent > LINGER_LIMITS.maxBytes, `sent ${sent} bytes`);
  assert.ok(sent < 64 * MIB, `sent ${sent} bytes`);
});

test('a client that stops sending partway is closed after the idle bound', async () => {
  const { response } = await floodUntilClosed(256 * 1024);
  assert.match(response, /^HTTP\/1\.1 413 /);
});

test('a refusal of a request without a body keeps its connection (no Connection: close)', async () => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const get = () =>
      new Promise<{ status: number; connection: string | undefined; socket: unknown }>((resolve, reject) => {
        const req = http.get({ host: '127.0.0.1', port, path: '/v1/runtimes', agent, headers: { authorization: 'Bearer nope' } }, (res) => {
          res.resume();
          res.on('end', () => resolve({ status: res.statusCode!, connection: res.headers.connection, socket: req.socket }));
        });
        req.on('error', reject);
      });
    const first = await get();
    const second = await get();
    assert.equal(first.status, 401);
    assert.equal(first.connection, 'keep-alive');
    assert.equal(second.socket, first.socket, 'the same connection served both');
  } finally {
    agent.destroy();
  }
});

test('the service goes on serving after all of that', async () => {
  assert.equal((await h.call('GET', '/v1/runtimes/up')).status, 200);
});
