/**
 * The link between the service and its parts (src/platform/part-link.ts): calls and notes both
 * ways over a socket pair, frames cut anywhere, and a part that sends what it must not.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Duplex, PassThrough } from 'node:stream';
import { duplexPair } from '../support/link-pair.js';
import { LinkClosedError, LinkError, MAX_FRAME_BYTES, PartLink, STREAM_WINDOW, StreamClosedError, type LinkStream } from '../../src/platform/part-link.js';

/** Two ends of an in-memory pipe: what one writes, the other reads. */
const pair = duplexPair;

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

// ---- streams ----

const dataFrame = (wireId: number, data: Buffer, meta?: unknown): Buffer => {
  const metaBytes = meta === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(meta));
  const head = Buffer.alloc(10);
  head.writeUInt32BE((0x8000_0000 | (6 + metaBytes.length + data.length)) >>> 0, 0);
  head.writeUInt32BE(wireId, 4);
  head.writeUInt16BE(metaBytes.length, 8);
  return Buffer.concat([head, metaBytes, data]);
};

/** Lets every frame written so far be read by the other side: a call's answer comes after them. */
const roundTrip = (link: PartLink) => link.call('ping').catch(() => undefined);

test('a stream carries bytes both ways with their meta, and ends with a value or a failure', async () => {
  const [a, b] = pair();
  const service = new PartLink(a);
  const part = new PartLink(b);
  part.handle('upload', async (args) => {
    const stream = part.acceptStream((args as { stream: number }).stream, { receives: true, sends: false });
    let bytes = 0;
    for await (const chunk of stream) bytes += chunk.data.length;
    return { bytes, end: await stream.result };
  });
  part.handle('download', (args) => {
    const stream = part.acceptStream((args as { stream: number }).stream, { receives: false, sends: true });
    void (async () => {
      for (let i = 0; i < 40; i++) await stream.write(Buffer.alloc(64 * 1024, i), { channel: i % 2 === 0 ? 'stdout' : 'stderr', offset: i * 65536 });
      if ((args as { fail: boolean }).fail) stream.fail(new LinkError('tar failed', { code: 'failed_precondition' }));
      else stream.end({ exit: 0 });
    })();
    return null;
  });

  const up = service.openStream({ receives: false, sends: true });
  const uploaded = service.call('upload', { stream: up.id });
  for (let i = 0; i < 48; i++) await up.write(Buffer.alloc(64 * 1024 + 7, i));
  up.end('eof');
  assert.deepEqual(await uploaded, { bytes: 48 * (64 * 1024 + 7), end: 'eof' });

  for (const fail of [false, true]) {
    const down = service.openStream({ receives: true, sends: false });
    await service.call('download', { stream: down.id, fail });
    const metas: unknown[] = [];
    let bytes = 0;
    const read = (async () => {
      for await (const chunk of down) {
        if (chunk.meta !== undefined) metas.push(chunk.meta);
        assert.ok(chunk.data.every((x) => x === chunk.data[0]), 'bytes arrive as sent');
        bytes += chunk.data.length;
      }
    })();
    if (fail) {
      await assert.rejects(read, (err: LinkError) => err.message === 'tar failed' && (err.detail as { code: string }).code === 'failed_precondition');
    } else {
      await read;
      assert.deepEqual(await down.result, { exit: 0 });
    }
    assert.equal(bytes, 40 * 64 * 1024);
    assert.deepEqual(metas.slice(0, 2), [{ channel: 'stdout', offset: 0 }, { channel: 'stderr', offset: 65536 }]);
  }
  service.close();
});

test('a sender never gets ahead of its reader by more than the window', async () => {
  const [a, b] = pair();
  const service = new PartLink(a).handle('ping', () => null);
  const part = new PartLink(b).handle('ping', () => null);
  let stream: LinkStream | null = null;
  part.handle('open', (args) => void (stream = part.acceptStream((args as { stream: number }).stream, { receives: false, sends: true })));
  const down = service.openStream({ receives: true, sends: false });
  await service.call('open', { stream: down.id });
  await stream!.write(Buffer.alloc(STREAM_WINDOW));
  let more = false;
  const next = stream!.write(Buffer.alloc(1)).then(() => (more = true));
  await roundTrip(part);
  await roundTrip(service);
  assert.equal(more, false, 'the window is spent: the next byte waits for the reader');
  for await (const chunk of down) {
    assert.equal(chunk.data.length, STREAM_WINDOW);
    break; // leaving the loop cancels
  }
  await next;
  assert.equal(more, true, 'what the reader took was granted again');
  await roundTrip(service);
  await roundTrip(part);
  await assert.rejects(stream!.write(Buffer.alloc(1)), StreamClosedError, 'a reader that stopped fails the writer');
  assert.equal(await down.result, undefined);
  service.close();
});

test('cancelling a stream tells its sender, and the link closing fails what waits', async () => {
  const [a, b] = pair();
  const service = new PartLink(a);
  const part = new PartLink(b);
  let cancelled = false;
  let accepted: LinkStream | null = null;
  part.handle('open', (args) => {
    accepted = part.acceptStream((args as { stream: number }).stream, { receives: true, sends: true });
    accepted.onCancel(() => (cancelled = true));
    return null;
  });
  const s = service.openStream({ receives: true, sends: true });
  await service.call('open', { stream: s.id });
  s.cancel();
  await assert.rejects(
    (async () => {
      for (;;) await accepted!.write(Buffer.alloc(1000));
    })(),
    StreamClosedError,
  );
  assert.ok(cancelled);
  const waiting = accepted!.result;
  service.close();
  await assert.rejects(waiting, LinkClosedError);
  await assert.rejects(s.write(Buffer.alloc(1)), LinkClosedError);
});

test('stream frames cut at every offset are read the same; bytes past the credit end the link', async () => {
  const stream1 = [dataFrame(3, Buffer.from('hello'), { channel: 'stdout', offset: 0 }), dataFrame(3, Buffer.alloc(300, 7)), frame({ t: 'end', s: 3, value: { done: true } })];
  const bytes = Buffer.concat([...stream1, dataFrame(99, Buffer.from('for a stream nobody knows'))]);
  for (let cut = 1; cut < bytes.length; cut++) {
    const input = new PassThrough();
    const link = new PartLink(Duplex.from({ readable: input, writable: new PassThrough() }));
    const stream = link.openStream({ receives: true, sends: false });
    assert.equal(stream.id, 1, 'wire id 3: stream 1 of this side, in a frame from the other');
    input.write(bytes.subarray(0, cut));
    input.write(bytes.subarray(cut));
    const got: Array<{ meta: unknown; data: string }> = [];
    for await (const chunk of stream) got.push({ meta: chunk.meta, data: chunk.data.toString('latin1') });
    assert.deepEqual(got, [{ meta: { channel: 'stdout', offset: 0 }, data: 'hello' }, { meta: undefined, data: '\x07'.repeat(300) }], `cut at ${cut}`);
    assert.deepEqual(await stream.result, { done: true });
    assert.equal(link.closed, false);
    link.close();
  }

  const input = new PassThrough();
  const link = new PartLink(Duplex.from({ readable: input, writable: new PassThrough() }));
  const stream = link.openStream({ receives: true, sends: false });
  const reason = new Promise<string>((r) => link.onClose(r));
  input.write(dataFrame(3, Buffer.alloc(STREAM_WINDOW)));
  input.write(dataFrame(3, Buffer.alloc(1)));
  assert.match(await reason, /more than its credit/);
  await assert.rejects(stream.result, LinkClosedError);

  const huge = Buffer.alloc(4);
  huge.writeUInt32BE((0x8000_0000 | (16 * 1024 * 1024)) >>> 0);
  const input2 = new PassThrough();
  const link2 = new PartLink(Duplex.from({ readable: input2, writable: new PassThrough() }));
  const reason2 = new Promise<string>((r) => link2.onClose(r));
  input2.write(huge);
  assert.match(await reason2, /data frame of \d+ bytes is over/, 'a data frame is capped from its header');
});

test('an opener that ends or cancels before the other side accepted its stream is heard once it does', async () => {
  const [a, b] = pair();
  const service = new PartLink(a);
  const part = new PartLink(b);
  let release: () => void = () => undefined;
  const later = new Promise<void>((resolve) => (release = resolve));
  part.handle('upload', async (args) => {
    await later; // the handler runs after the stream's end has come
    const stream = part.acceptStream((args as { stream: number }).stream, { receives: true, sends: false });
    let bytes = 0;
    for await (const chunk of stream) bytes += chunk.data.length;
    return { bytes, end: await stream.result };
  });
  let cancelled = false;
  part.handle('download', async (args) => {
    await later;
    const stream = part.acceptStream((args as { stream: number }).stream, { receives: false, sends: true });
    stream.onCancel(() => (cancelled = true));
    return null;
  });
  const up = service.openStream({ receives: false, sends: true });
  const uploaded = service.call('upload', { stream: up.id });
  up.end('nothing');
  const down = service.openStream({ receives: true, sends: false });
  const downloaded = service.call('download', { stream: down.id });
  down.cancel();
  await roundTrip(service);
  release();
  assert.deepEqual(await uploaded, { bytes: 0, end: 'nothing' });
  await downloaded;
  assert.ok(cancelled, 'the cancel reached the stream once accepted');
  service.close();
});
