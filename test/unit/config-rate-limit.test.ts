/** VESSEL_RATE_LIMIT_SHARES divides the per-token rate among the API nodes that enforce it. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/cli/config.js';

test('one node enforces the whole rate; N nodes each enforce an Nth, rounded up; off stays off', () => {
  assert.deepEqual(loadConfig({}).rateLimit, { ratePerSec: 200, burst: 1000 });
  assert.deepEqual(loadConfig({ VESSEL_RATE_LIMIT_SHARES: '3' }).rateLimit, { ratePerSec: 67, burst: 334 });
  assert.deepEqual(loadConfig({ VESSEL_RATE_LIMIT_SHARES: '3', VESSEL_RATE_LIMIT_RPS: '0' }).rateLimit, { ratePerSec: 0, burst: 334 });
  for (const bad of ['0', '1.5', '-2', 'two']) assert.throws(() => loadConfig({ VESSEL_RATE_LIMIT_SHARES: bad }), /VESSEL_RATE_LIMIT_SHARES/, bad);
});
