/**
 * The SQLite store's place (src/store/open-store.ts): a directory of its own, which the API's
 * user owns; a store from before moves into it whole; a link planted there is refused.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, mkdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore, prepareSqliteDir, sqliteFile } from '../../src/store/open-store.js';

test('a store from before (DATA_DIR/vessel.db) moves into DATA_DIR/store with its journal, and keeps its rows', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-store-'));
  try {
    const before = await openStore({ dataDir: join(dir, 'old'), databaseUrl: undefined });
    await before.close();
    mkdirSync(join(dir, 'legacy'));
    // What an older service left: its file at the data directory's top.
    writeFileSync(join(dir, 'legacy', 'vessel.db'), readFileSync(sqliteFile(join(dir, 'old'))));
    writeFileSync(join(dir, 'legacy', 'vessel.db-wal'), '');
    prepareSqliteDir(join(dir, 'legacy'));
    assert.ok(!existsSync(join(dir, 'legacy', 'vessel.db')) && !existsSync(join(dir, 'legacy', 'vessel.db-wal')));
    assert.ok(existsSync(sqliteFile(join(dir, 'legacy'))) && existsSync(`${sqliteFile(join(dir, 'legacy'))}-wal`));
    const after = await openStore({ dataDir: join(dir, 'legacy'), databaseUrl: undefined });
    assert.deepEqual(await after.tokens.list(), []);
    await after.close();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('a symbolic link where the store or its journal goes is refused, never opened', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-store-'));
  try {
    const victim = join(dir, 'victim');
    writeFileSync(victim, '');
    for (const name of ['', '-wal', '-journal']) {
      const data = join(dir, `d${name}`);
      mkdirSync(join(data, 'store'), { recursive: true });
      symlinkSync(victim, sqliteFile(data) + name);
      await assert.rejects(openStore({ dataDir: data, databaseUrl: undefined }), /symbolic link/);
    }
    assert.equal(readFileSync(victim, 'utf8'), '', 'the link target was not made a database');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
