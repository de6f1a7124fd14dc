/** Notes pushed in one event-loop turn go out as one message, never more than `max` at once, none lost. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { NoteBatch } from '../../src/platform/note-batch.js';

test('what one turn pushes is one batch; a full batch goes at once; the next turn starts a new one', async () => {
  const sent: number[][] = [];
  const batch = new NoteBatch<number>((items) => sent.push(items), 3);
  for (let i = 1; i <= 7; i++) batch.push(i);
  assert.deepEqual(sent, [[1, 2, 3], [4, 5, 6]], 'full batches go at once');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(sent, [[1, 2, 3], [4, 5, 6], [7]], 'the rest at the end of the turn');
  batch.push(8);
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(sent.at(-1), [8]);
});
