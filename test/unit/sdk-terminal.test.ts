/**
 * rt.terminal() against a scripted WebSocket server: the token in a subprotocol and never in the
 * URL, output that came before anyone listened, input, resize, the exit, and a refused upgrade.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { WebSocket, WebSocketServer } from 'ws';
import { Vessel, VesselError, type WebSocketClass } from '../../client/index.js';

const runtime = { id: '00000000-0000-4000-8000-000000000001', display_name: 'r', status: 'running', egress_policy: { enabled: true, allowed_hosts: [] }, ingress_specs: [], resources: { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 }, created_at: '2026-01-01T00:00:00.000Z' };
const TOKEN = 'vsl_terminal-token';

const upgrades: IncomingMessage[] = [];
const received: Array<string | Buffer> = [];
const server = createServer((req, res) => {
  res.writeHead(200, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ data: runtime }));
  void req;
});
const wss = new WebSocketServer({ noServer: true, handleProtocols: (offered) => (offered.has('vessel.v1') ? 'vessel.v1' : false) });
server.on('upgrade', (req, socket, head) => {
  upgrades.push(req);
  if (req.url?.includes('process_id=9') === true) {
    socket.end('HTTP/1.1 409 Conflict\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}');
    return;
  }
  wss.handleUpgrade(req, socket, head, (ws) => {
    // The prompt goes out with the socket's first bytes, before the client could listen.
    ws.send(Buffer.from('$ '));
    ws.on('message', (data: Buffer, isBinary: boolean) => {
      received.push(isBinary ? data : data.toString('utf8'));
      if (isBinary && data.toString() === 'exit\r') {
        ws.send(JSON.stringify({ type: 'exit', exit_code: 3, signal: null }));
        ws.close(1000);
      } else if (isBinary) ws.send(data);
    });
  });
});
await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
after(() => {
  wss.close();
  server.closeAllConnections();
  server.close();
});

test('a terminal: subprotocol auth, early output kept, input, resize and the exit', async () => {
  const rt = await new Vessel({ url, token: TOKEN }).runtimes.get('r');
  const term = await rt.terminal({ rows: 30, cols: 100 });
  const upgrade = upgrades.at(-1)!;
  assert.equal(upgrade.url, `/v1/runtimes/${runtime.id}/terminal?rows=30&cols=100`);
  assert.ok(!upgrade.url!.includes(TOKEN) && upgrade.headers.authorization === undefined);
  const offered = String(upgrade.headers['sec-websocket-protocol']).split(',').map((p) => p.trim());
  assert.deepEqual(offered, ['vessel.v1', `vessel.bearer.${Buffer.from(TOKEN).toString('base64url')}`]);

  const chunks: string[] = [];
  let echoed!: () => void;
  const echo = new Promise<void>((resolve) => (echoed = resolve));
  term.onData((bytes) => {
    chunks.push(new TextDecoder().decode(bytes));
    if (chunks.join('').includes('ls\r')) echoed();
  });
  term.write('ls\r');
  await echo;
  assert.equal(chunks[0], '$ ', 'the output from before onData() was kept for it');

  term.resize(40, 120);
  const exits: unknown[] = [];
  term.onExit((exit) => exits.push(exit));
  term.write(new TextEncoder().encode('exit\r'));
  assert.deepEqual(await term.wait(), { exit_code: 3, signal: null });
  assert.deepEqual(exits, [{ exit_code: 3, signal: null }]);
  assert.deepEqual(received.slice(-3).map(String), ['ls\r', JSON.stringify({ type: 'resize', rows: 40, cols: 120 }), 'exit\r']);
});

test('a refused upgrade is a VesselError with the code of its status', async () => {
  // The WebSocket class given explicitly, as a browser bundle or a test would.
  const rt = await new Vessel({ url, token: TOKEN, WebSocket: WebSocket as unknown as WebSocketClass }).runtimes.get('r');
  await assert.rejects(rt.terminal({ processId: 9 }), (e: VesselError) => e instanceof VesselError && e.code === 'failed_precondition' && e.status === 409);
});

test('an aborted signal opens no socket', async () => {
  const rt = await new Vessel({ url, token: TOKEN }).runtimes.get('r');
  const before = upgrades.length;
  await assert.rejects(rt.terminal({ signal: AbortSignal.abort() }), { name: 'AbortError' });
  assert.equal(upgrades.length, before);
});
