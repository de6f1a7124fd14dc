/** The native relay thread: bytes, backpressure, half-closes and closing by tag, over real loopback sockets. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { connect, createServer, type Socket } from 'node:net';
import { closeRelays, relaySockets } from '../../src/net/socket-ops.js';

/** A connected pair: [client side, server side]. */
async function pair(): Promise<[Socket, Socket]> {
  const server = createServer({ pauseOnConnect: true, allowHalfOpen: true });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const accepted = new Promise<Socket>((r) => server.once('connection', r));
  const client = connect({ port: (server.address() as { port: number }).port, host: '127.0.0.1', allowHalfOpen: true });
  client.pause();
  await new Promise((r) => client.once('connect', r));
  const s = await accepted;
  server.close();
  return [client, s];
}

const digest = (b: Buffer) => createHash('sha256').update(b).digest('hex');

function collect(s: Socket): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    s.on('data', (d) => chunks.push(d));
    s.on('end', () => resolve(Buffer.concat(chunks)));
    s.on('error', reject);
  });
}

test('relay: 8 MiB each way arrives whole, and a half-close passes through without ending the other way', async () => {
  // guest <-> [a | b] relayed [c | d] <-> upstream
  const [guest, a] = await pair();
  const [c, upstream] = await pair();
  relaySockets(a, c, 1);
  guest.resume();
  upstream.resume();
  const up = randomBytes(8 << 20);
  const down = randomBytes(8 << 20);
  const atUpstream = collect(upstream);
  const atGuest = collect(guest);
  guest.end(up);
  assert.equal(digest(await atUpstream), digest(up), 'guest to upstream, then end of stream');
  // The upstream can still answer after the guest's half-close.
  upstream.end(down);
  assert.equal(digest(await atGuest), digest(down), 'upstream to guest');
});

test('relay: a reset on one side closes the other', async () => {
  const [guest, a] = await pair();
  const [c, upstream] = await pair();
  relaySockets(a, c, 1);
  upstream.resume();
  const closed = new Promise((r) => upstream.once('close', r));
  upstream.on('error', () => undefined);
  guest.resetAndDestroy();
  await closed;
});

test('relay: closeRelays resets every relay of its tag and no other, and each relay reports its end', async () => {
  const relayed = async (tag: number) => {
    const [guest, a] = await pair();
    const [c, upstream] = await pair();
    let ended = false;
    relaySockets(a, c, tag, () => (ended = true));
    guest.resume();
    upstream.resume();
    guest.on('error', () => undefined);
    upstream.on('error', () => undefined);
    return { guest, upstream, ended: () => ended };
  };
  const doomed = [await relayed(7), await relayed(7)];
  const kept = await relayed(8);
  const closed = (s: Socket) => new Promise((r) => (s.destroyed ? r(null) : s.once('close', r)));
  await closeRelays(7);
  await Promise.all(doomed.flatMap((r) => [closed(r.guest), closed(r.upstream)]));
  const deadline = Date.now() + 2000;
  while (!doomed.every((r) => r.ended()) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  assert.ok(doomed.every((r) => r.ended()), 'both relays reported their end');
  assert.equal(kept.ended(), false);
  const echoed = new Promise<string>((r) => kept.upstream.once('data', (d) => r(String(d))));
  kept.guest.write('still here');
  assert.equal(await echoed, 'still here', 'a relay of another tag still moves bytes');
  kept.guest.destroy();
  kept.upstream.destroy();
});
