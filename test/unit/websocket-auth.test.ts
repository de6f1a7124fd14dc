/** The bearer token a browser's WebSocket carries in a subprotocol (src/api/websocket-auth.ts). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { bearerFromProtocols, bearerProtocol, selectProtocol, WEBSOCKET_PROTOCOL } from '../../src/api/websocket-auth.js';

const upgrade = (protocols: string) => ({ upgrade: 'websocket', 'sec-websocket-protocol': protocols });

test('the token comes back from its base64url subprotocol, wherever it is in the list', () => {
  const token = 'vsl_' + 'A-b_9'.repeat(8);
  assert.equal(bearerFromProtocols(upgrade(`${WEBSOCKET_PROTOCOL}, ${bearerProtocol(token)}`)), token);
  assert.equal(bearerFromProtocols(upgrade(`${bearerProtocol(token)},${WEBSOCKET_PROTOCOL}`)), token);
  assert.equal(bearerFromProtocols(upgrade(bearerProtocol('~!x'))), '~!x', 'any printable token');
});

test('anything else carries no token', () => {
  const good = bearerProtocol('vsl_abc');
  for (const [what, headers] of [
    ['no upgrade', { 'sec-websocket-protocol': good }],
    ['an upgrade to something else', { upgrade: 'h2c', 'sec-websocket-protocol': good }],
    ['no subprotocols', { upgrade: 'websocket' }],
    ['only ours', upgrade(WEBSOCKET_PROTOCOL)],
    ['an empty token', upgrade('vessel.bearer.')],
    ['characters outside base64url', upgrade('vessel.bearer.dnNs+YWJj')],
    ['a token with a space', upgrade(bearerProtocol('vsl abc'))],
    ['a token with a control byte', upgrade(bearerProtocol('vsl\x01abc'))],
    ['a token over 512 bytes', upgrade(bearerProtocol('a'.repeat(513)))],
    ['a header over 1 KiB', upgrade(`${'x'.repeat(1024)}, ${good}`)],
  ] as const) {
    assert.equal(bearerFromProtocols(headers), null, what);
  }
});

test('the server selects vessel.v1, never the subprotocol holding the token', () => {
  assert.equal(selectProtocol(new Set([bearerProtocol('vsl_abc'), WEBSOCKET_PROTOCOL])), WEBSOCKET_PROTOCOL);
  assert.equal(selectProtocol(new Set([bearerProtocol('vsl_abc')])), false);
});
