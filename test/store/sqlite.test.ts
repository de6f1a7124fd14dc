/** The store contract (store-contract.ts) on the embedded SQLite store. */
import { after } from 'node:test';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { SqliteStore } from '../../src/store/sqlite-store.js';
import { storeContract } from './store-contract.js';

const dirs: string[] = [];
after(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

storeContract({
  async fresh() {
    const dir = mkdtempSync(join(tmpdir(), 'vessel-store-'));
    dirs.push(dir);
    const file = join(dir, 'vessel.db');
    return { store: new SqliteStore(file), reopen: async () => new SqliteStore(file) };
  },
});
