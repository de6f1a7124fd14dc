/** The SSE output encoder: text never cut inside a character, offsets, ids and lost counts exact. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { OutputEncoder } from '../../src/api/event-stream.js';

const chunk = (offset: number, data: Buffer, lost = 0, channel: 'stdout' | 'stderr' = 'stdout') => ({ channel, offset, data, lost });
const decode = (e: { data: string; encoding: string }) => Buffer.from(e.data, e.encoding === 'base64' ? 'base64' : 'utf8');

test('a 4-byte character cut 1/3 and 3/1 comes whole, as text, with exact offsets and ids', () => {
  const smile = Buffer.from('a😀b');
  for (const cut of [2, 4]) {
    const enc = new OutputEncoder({ stdout: 0, stderr: 0 });
    const first = enc.encode(chunk(0, smile.subarray(0, cut)));
    const second = enc.encode(chunk(cut, smile.subarray(cut)));
    const all = [...first, ...second];
    assert.deepEqual(all.map((e) => e.event.encoding), ['utf8', 'utf8']);
    assert.equal(all.map((e) => e.event.data).join(''), 'a😀b');
    assert.equal(first.at(-1)!.id, '1,0', 'the id stops before the held-back bytes');
    assert.equal(second[0]!.event.offset, 1);
    assert.equal(second.at(-1)!.id, `${smile.length},0`);
  }
});

test('invalid bytes go as base64 at once; bytes that start no character are not held back', () => {
  const enc = new OutputEncoder({ stdout: 0, stderr: 0 });
  const out = enc.encode(chunk(0, Buffer.from([0x61, 0xff])));
  assert.equal(out.length, 1);
  assert.equal(out[0]!.event.encoding, 'base64');
  assert.deepEqual([...decode(out[0]!.event)], [0x61, 0xff]);
  assert.equal(out[0]!.id, '2,0');
});

test('a gap after a held-back character: the fragment goes alone, the gap is reported once', () => {
  const enc = new OutputEncoder({ stdout: 0, stderr: 0 });
  assert.equal(enc.encode(chunk(0, Buffer.from([0xf0, 0x9f]))).length, 0);
  const out = enc.encode(chunk(10, Buffer.from('x'), 8));
  assert.equal(out.length, 2);
  assert.deepEqual([...decode(out[0]!.event)], [0xf0, 0x9f]);
  assert.equal(out[0]!.id, '2,0', 'each event has its own id');
  assert.equal(out[1]!.event.offset, 10);
  assert.equal(out[1]!.event.lost, 8);
  assert.equal(out[1]!.id, '11,0');
});

test('a gap whose first chunk is only part of a character is reported on the next event', () => {
  const enc = new OutputEncoder({ stdout: 0, stderr: 0 });
  assert.equal(enc.encode(chunk(50, Buffer.from([0xf0]), 50)).length, 0);
  const out = enc.encode(chunk(51, Buffer.from([0x9f, 0x98, 0x80])));
  assert.equal(out.length, 1);
  assert.equal(out[0]!.event.data, '😀');
  assert.equal(out[0]!.event.offset, 50);
  assert.equal(out[0]!.event.lost, 50);
});

test('channels keep their own carry, offsets and ids; flush sends what an ended process left', () => {
  const enc = new OutputEncoder({ stdout: 5, stderr: 7 });
  enc.encode(chunk(5, Buffer.from([0xc3]), 0, 'stdout'));
  const err = enc.encode(chunk(7, Buffer.from('e'), 0, 'stderr'));
  assert.equal(err[0]!.id, '5,8');
  const rest = enc.flush();
  assert.equal(rest.length, 1);
  assert.equal(rest[0]!.channel, 'stdout');
  assert.equal(rest[0]!.event.encoding, 'base64');
  assert.equal(rest[0]!.id, '6,8');
});
