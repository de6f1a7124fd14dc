/**
 * A runtime's route as last read stands in only while the store fails (src/cluster/last-known.ts):
 * an answer of the store, nothing found included, always wins over what was kept.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { notFound } from '../../src/core/errors.js';
import { LastKnown } from '../../src/cluster/last-known.js';

const outage = () => Promise.reject(new Error('connect ECONNREFUSED /var/run/postgresql/.s.PGSQL.5432'));

test('a failed read answers what the last read found; a read that succeeds replaces it', async () => {
  const routes = new LastKnown<string>();
  assert.equal(await routes.get('rt', async () => 'host-a'), 'host-a');
  assert.equal(await routes.get('rt', outage), 'host-a');
  assert.equal(await routes.get('rt', async () => 'host-b'), 'host-b', 'moved while the store answered');
  assert.equal(await routes.get('rt', outage), 'host-b');
});

test('nothing kept: the failure; nothing found: nothing, and nothing kept after it', async () => {
  const routes = new LastKnown<string>();
  await assert.rejects(routes.get('never-read', outage), /ECONNREFUSED/);
  assert.equal(await routes.get('rt', async () => 'host-a'), 'host-a');
  assert.equal(await routes.get('rt', async () => undefined), undefined, 'deleted');
  await assert.rejects(routes.get('rt', outage), /ECONNREFUSED/, 'a deleted runtime is not routed from memory');
});

test("an error of the API's catalogue is an answer, passed on whatever was kept", async () => {
  const routes = new LastKnown<string>();
  await routes.get('rt', async () => 'host-a');
  await assert.rejects(routes.get('rt', () => Promise.reject(notFound('runtime', 'rt'))), /not found|runtime/);
});

test('it keeps at most its bound, dropping the entry read longest ago', async () => {
  const routes = new LastKnown<string>(2);
  for (const key of ['a', 'b', 'c']) await routes.get(key, async () => `host-${key}`);
  await assert.rejects(routes.get('a', outage));
  assert.equal(await routes.get('b', outage), 'host-b');
  assert.equal(await routes.get('c', outage), 'host-c');
});
