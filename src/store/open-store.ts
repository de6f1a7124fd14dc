/**
 * Which store the service runs on: PostgreSQL when VESSEL_DATABASE_URL names one, otherwise the
 * embedded SQLite file in the data directory, as before.
 */
import { existsSync, lstatSync, mkdirSync, renameSync } from 'node:fs';
import { join } from 'node:path';
import type { Store } from '../core/ports.js';
import type { PostgresStoreOptions } from './postgres-store.js';
import { SqliteStore } from './sqlite-store.js';

export interface StoreConfig {
  dataDir: string;
  /** postgres:// or postgresql://; undefined for SQLite. */
  databaseUrl: string | undefined;
}

/**
 * The SQLite store's directory: its own, so that the API's unprivileged user can own it (SQLite
 * makes its journal files beside the database) while the data directory stays root's.
 */
export const sqliteDir = (dataDir: string): string => join(dataDir, 'store');
export const sqliteFile = (dataDir: string): string => join(sqliteDir(dataDir), 'vessel.db');

/** Makes the store's directory; a database from before it had one (DATA_DIR/vessel.db) moves into it. */
export function prepareSqliteDir(dataDir: string): void {
  mkdirSync(sqliteDir(dataDir), { recursive: true, mode: 0o700 });
  // The directory is the API user's: a link it planted there would have root's commands (vessel
  // token …) open, or make a database of, a file of its choosing.
  for (const name of ['', '-wal', '-shm', '-journal']) {
    if (lstatSync(sqliteFile(dataDir) + name, { throwIfNoEntry: false })?.isSymbolicLink() === true) throw new Error(`${sqliteFile(dataDir)}${name} is a symbolic link; the store is a file of its own`);
  }
  const legacy = join(dataDir, 'vessel.db');
  if (!existsSync(legacy) || existsSync(sqliteFile(dataDir))) return;
  // The journal files first: a database that appears without its WAL would lose what it holds.
  for (const suffix of ['-wal', '-shm', '']) if (existsSync(legacy + suffix)) renameSync(legacy + suffix, sqliteFile(dataDir) + suffix);
}

export async function openStore(config: StoreConfig, options: PostgresStoreOptions = {}): Promise<Store> {
  if (config.databaseUrl === undefined) {
    prepareSqliteDir(config.dataDir);
    return new SqliteStore(sqliteFile(config.dataDir));
  }
  // Loaded only here: a service on SQLite never loads the PostgreSQL driver.
  const { PostgresStore } = await import('./postgres-store.js');
  return PostgresStore.open(config.databaseUrl, options);
}
