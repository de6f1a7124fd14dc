/**
 * Notes for a receiver that may be away: a batch leaves only once answered for, a failed one is
 * sent again in order, one batch is in flight at a time, and what passes the bound is dropped
 * oldest first and reported.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { AcknowledgedNotes } from '../../src/platform/acknowledged-notes.js';

/** A receiver whose answers the test gives, one call at a time. */
function receiver() {
  const calls: { items: number[]; answer: (ok: boolean) => void }[] = [];
  let waiting: (() => void) | null = null;
  return {
    calls,
    send: (items: number[]) =>
      new Promise<void>((resolve, reject) => {
        calls.push({ items, answer: (ok) => (ok ? resolve() : reject(new Error('away'))) });
        waiting?.();
      }),
    /** The next call, once it is made. */
    async next() {
      while (calls.length === 0) await new Promise<void>((r) => (waiting = r));
      waiting = null;
      return calls.shift()!;
    },
  };
}

const turn = () => new Promise((r) => setImmediate(r));

test('a batch goes once answered for; what came meanwhile is the next batch; order is kept', async () => {
  const r = receiver();
  const notes = new AcknowledgedNotes<number>({ send: r.send, maxBatch: 3, maxHeld: 100, retryMs: 1, onDropped: () => assert.fail('nothing is dropped') });
  for (let i = 1; i <= 4; i++) notes.push(i);
  const first = await r.next();
  assert.deepEqual(first.items, [1, 2, 3]);
  notes.push(5);
  await turn();
  assert.equal(r.calls.length, 0, 'one batch in flight at a time');
  assert.equal(notes.held, 5);
  first.answer(true);
  assert.deepEqual((await r.next()).items, [4, 5]);
});

test('a batch whose call failed is sent again, whole and first, with what came since behind it', async () => {
  const r = receiver();
  const notes = new AcknowledgedNotes<number>({ send: r.send, maxBatch: 2, maxHeld: 100, retryMs: 1, onDropped: () => assert.fail('nothing is dropped') });
  notes.push(1);
  notes.push(2);
  const failed = await r.next();
  notes.push(3);
  failed.answer(false);
  const again = await r.next();
  assert.deepEqual(again.items, [1, 2]);
  again.answer(true);
  const rest = await r.next();
  assert.deepEqual(rest.items, [3]);
  rest.answer(true);
  await turn();
  assert.equal(notes.held, 0);
  notes.close();
});

test('held past the bound, the oldest go, the batch in flight first, and the drop is reported once before the next batch', async () => {
  const r = receiver();
  const dropped: number[] = [];
  const notes = new AcknowledgedNotes<number>({ send: r.send, maxBatch: 2, maxHeld: 4, retryMs: 1, onDropped: (n) => dropped.push(n) });
  notes.push(1);
  notes.push(2);
  const inFlight = await r.next();
  for (let i = 3; i <= 7; i++) notes.push(i);
  assert.equal(notes.held, 4, 'bounded');
  // 1, 2 and 3 were dropped: answering for the batch removes nothing more.
  inFlight.answer(true);
  const next = await r.next();
  assert.deepEqual(next.items, [4, 5]);
  assert.deepEqual(dropped, [3]);
  next.answer(true);
  assert.deepEqual((await r.next()).items, [6, 7]);
  notes.close();
});
