/** VESSEL_DATABASE_URL: unset or empty keeps SQLite; only a PostgreSQL URL is taken. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/cli/config.js';

test('VESSEL_DATABASE_URL chooses PostgreSQL; unset or empty keeps the embedded SQLite; anything else is refused', () => {
  assert.equal(loadConfig({}).databaseUrl, undefined);
  assert.equal(loadConfig({ VESSEL_DATABASE_URL: '' }).databaseUrl, undefined);
  assert.equal(loadConfig({ VESSEL_DATABASE_URL: 'postgres://u:p@db/vessel' }).databaseUrl, 'postgres://u:p@db/vessel');
  assert.equal(loadConfig({ VESSEL_DATABASE_URL: 'postgresql://u@/vessel?host=/run/postgresql' }).databaseUrl, 'postgresql://u@/vessel?host=/run/postgresql');
  assert.throws(() => loadConfig({ VESSEL_DATABASE_URL: 'mysql://u@db/vessel' }), /VESSEL_DATABASE_URL must be a postgres/);
  assert.throws(() => loadConfig({ VESSEL_DATABASE_URL: './vessel.db' }), /VESSEL_DATABASE_URL must be a postgres/);
});
