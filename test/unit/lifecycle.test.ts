import { test } from 'node:test';
import assert from 'node:assert/strict';
import { isAllowed, requireState, RESULT_OF } from '../../src/core/lifecycle.js';
import { RUNTIME_STATUSES } from '../../src/core/types.js';
import { VesselError } from '../../src/core/errors.js';

test('the transition table of DESIGN.md', () => {
  const allowed = (op: Parameters<typeof isAllowed>[0]) => RUNTIME_STATUSES.filter((s) => isAllowed(op, s));
  assert.deepEqual(allowed('start'), ['shutdown', 'crashed', 'suspended']);
  assert.deepEqual(allowed('pause'), ['running']);
  assert.deepEqual(allowed('resume'), ['paused', 'suspended']);
  assert.deepEqual(allowed('suspend'), ['running']);
  assert.deepEqual(allowed('stop'), ['running', 'paused']);
  assert.deepEqual(allowed('exec'), ['running']);
  assert.deepEqual(allowed('files'), ['running']);
  assert.deepEqual(allowed('checkpoint'), ['running', 'paused']);
  assert.deepEqual(RESULT_OF, { start: 'running', pause: 'paused', resume: 'running', suspend: 'suspended', stop: 'shutdown' });
});

test('a refused transition is failed_precondition naming the states', () => {
  assert.throws(
    () => requireState('pause', 'shutdown', 'x'),
    (e: unknown) => e instanceof VesselError && e.code === 'failed_precondition' && /shutdown/.test(e.message) && /running/.test(e.message),
  );
});
