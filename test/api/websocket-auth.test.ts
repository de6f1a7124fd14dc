/**
 * A browser's WebSocket authenticates with a subprotocol (docs/processes.md, "Terminals"): a real
 * upgrade over a real socket, refused or admitted before the route runs.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import type { AddressInfo } from 'node:net';
import WebSocket from 'ws';
import { bearerProtocol, WEBSOCKET_PROTOCOL } from '../../src/api/websocket-auth.js';
import { apiHarness, type ApiHarness } from '../support/api-harness.js';

let h: ApiHarness;
let base: string;

before(async () => {
  h = await apiHarness();
  await h.app.listen({ host: '127.0.0.1', port: 0 });
  base = `ws://127.0.0.1:${(h.app.server.address() as AddressInfo).port}`;
});
after(() => h.close());

/** The status an upgrade is refused with. */
function refusal(path: string, protocols: string[]): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(base + path, protocols);
    ws.on('open', () => reject(new Error('the upgrade was accepted')));
    ws.on('unexpected-response', (_req, res) => {
      let body = '';
      res.on('data', (c: Buffer) => (body += c.toString()));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: JSON.parse(body) }));
    });
    ws.on('error', () => undefined);
  });
}

test('a token in the bearer subprotocol is a token: the route runs (and finds no such runtime)', async () => {
  const r = await refusal('/v1/runtimes/nope/terminal', [WEBSOCKET_PROTOCOL, bearerProtocol(h.admin)]);
  assert.equal(r.status, 404);
  assert.equal(r.body.error.code, 'not_found');
});

test('without it, or with a wrong one, the upgrade is unauthenticated', async () => {
  for (const protocols of [[WEBSOCKET_PROTOCOL], [WEBSOCKET_PROTOCOL, bearerProtocol('vsl_wrong')], [WEBSOCKET_PROTOCOL, 'vessel.bearer.%%%']]) {
    const r = await refusal('/v1/runtimes/nope/terminal', protocols);
    assert.equal(r.status, 401, protocols.join(','));
    assert.equal(r.body.error.code, 'unauthenticated');
  }
});

test('a route that does not upgrade never takes a token from a subprotocol', async () => {
  const res = await h.app.inject({
    method: 'GET',
    url: '/v1/secrets',
    headers: { connection: 'Upgrade', upgrade: 'websocket', 'sec-websocket-protocol': `${WEBSOCKET_PROTOCOL}, ${bearerProtocol(h.admin)}` },
  });
  assert.equal(res.statusCode, 401);
});
