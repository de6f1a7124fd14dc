/**
 * The link between the service and its parts (src/platform/part-link.ts): calls and notes both
 * ways over a socket pair, frames cut anywhere, and a part that sends what it must not.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Duplex, PassThrough } from 'node:stream';
import { LinkClosedError, MAX_FRAME_BYTES, PartLink } from '../../src/platform/part-link.js';

/** Two ends of an in-memory pipe: what one writes, the other reads. */
function pair(): [Duplex, Duplex] {
  const aToB = new PassThrough();
  const bToA = new PassThrough();
  const end = (readable: PassThrough, writable: PassThrough) =>
    new Duplex({
      read() {},
      write(chunk, _enc, done) {
        writable.write(chunk, done);
      },
      destroy(err, done) {
        writable.destroy();
        readable.destroy();
        done(err);
      },
    });
  const a = end(bToA, aToB);
  const b = end(aToB, bToA);
  aToB.on('data', (c) => b.push(c));
  bToA.on('data', (c) => a.push(c));
  aToB.on('close', () => b.destroy());
  bToA.on('close', () => a.destroy());
  return [a, b];
}

const frame = (message: unknown): Buffer => {
  const body = Buffer.from(JSON.stringify(message));
  const head = Buffer.alloc(4);
  head.writeUInt32BE(body.length);
  return Buffer.concat([head, body]);
};

test('calls are answered both ways, errors come back as errors, notes need no answer', async () => {
  const [a, b] = pair();
  const service = new PartLink(a);
  const part = new PartLink(b);
  const notes: unknown[] = [];
  service.handle('double', (n) => (n as number) * 2).handle('fail', () => Promise.reject(new Error('no such runtime')));
  part.handle('echo', (v) => v).handle('note', (v) => void notes.push(v));
  assert.equal(await part.call('double', 21), 42);
  assert.deepEqual(await service.call('echo', { a: [1, 'x'] }), { a: [1, 'x'] });
  await assert.rejects(part.call('fail'), /no such runtime/);
  await assert.rejects(part.call('widen', { path: '/etc/shadow' }), /no method 'widen'/, 'a method the other side does not name is refused');
  service.notify('note', 'seen');
  await part.call('double', 0).catch(() => undefined);
  await service.call('echo', null);
  assert.deepEqual(notes, ['seen']);
  service.close();
});

test('frames cut at every offset and run together are read the same', async () => {
  const messages = [{ t: 'note', method: 'n', args: 'é'.repeat(50) }, { t: 'note', method: 'n', args: { deep: [1, 2, 3] } }, { t: 'note', method: 'n', args: null }];
  const bytes = Buffer.concat(messages.map(frame));
  for (let cut = 1; cut < bytes.length; cut++) {
    const got: unknown[] = [];
    const input = new PassThrough();
    const link = new PartLink(Duplex.from({ readable: input, writable: new PassThrough() }));
    link.handle('n', (v) => void got.push(v));
    input.write(bytes.subarray(0, cut));
    input.write(bytes.subarray(cut));
    await new Promise((r) => setImmediate(r));
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(got, messages.map((m) => m.args), `cut at ${cut}`);
    link.close();
  }
});

test('a frame over the limit ends the link from its header alone, and pending calls fail', async () => {
  const input = new PassThrough();
  const link = new PartLink(Duplex.from({ readable: input, writable: new PassThrough() }));
  const pending = link.call('anything');
  const head = Buffer.alloc(4);
  head.writeUInt32BE(MAX_FRAME_BYTES + 1);
  input.write(head);
  await assert.rejects(pending, LinkClosedError);
  assert.ok(link.closed);
  await assert.rejects(link.call('after'), LinkClosedError);
});

test('a frame that is not JSON, or a message of no known kind, ends the link', async () => {
  for (const bad of [Buffer.concat([Buffer.from([0, 0, 0, 3]), Buffer.from('{{{')]), frame({ t: 'call', id: 'x', method: 'm' }), frame(7)]) {
    const input = new PassThrough();
    const link = new PartLink(Duplex.from({ readable: input, writable: new PassThrough() }));
    const reason = new Promise<string>((r) => link.onClose(r));
    input.write(bad);
    assert.match(await reason, /JSON|kind|object/);
  }
});
