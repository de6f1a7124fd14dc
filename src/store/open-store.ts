/**
 * Which store the service runs on: PostgreSQL when VESSEL_DATABASE_URL names one, otherwise the
 * embedded SQLite file in the data directory, as before.
 */
import { join } from 'node:path';
import type { Store } from '../core/ports.js';
import type { PostgresStoreOptions } from './postgres-store.js';
import { SqliteStore } from './sqlite-store.js';

export interface StoreConfig {
  dataDir: string;
  /** postgres:// or postgresql://; undefined for SQLite. */
  databaseUrl: string | undefined;
}

export async function openStore(config: StoreConfig, options: PostgresStoreOptions = {}): Promise<Store> {
  if (config.databaseUrl === undefined) return new SqliteStore(join(config.dataDir, 'vessel.db'));
  // Loaded only here: a service on SQLite never loads the PostgreSQL driver.
  const { PostgresStore } = await import('./postgres-store.js');
  return PostgresStore.open(config.databaseUrl, options);
}
