import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { lockDataDir } from '../../src/cli/data-dir.js';

test('one service per data directory; a lock left by a dead process is taken over', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-lock-'));
  try {
    const release = lockDataDir(dir);
    assert.equal(readFileSync(join(dir, 'service.pid'), 'utf8').trim(), String(process.pid));
    release();
    assert.equal(existsSync(join(dir, 'service.pid')), false);

    // A live process that looks like `vessel serve` holds it.
    const other = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', '/opt/vessel/dist/src/cli/main.js', 'serve'], { stdio: 'ignore' });
    try {
      await new Promise((r) => setTimeout(r, 200));
      writeFileSync(join(dir, 'service.pid'), `${other.pid}\n`);
      assert.throws(() => lockDataDir(dir), new RegExp(`another Vessel service \\(pid ${other.pid}\\)`));
    } finally {
      other.kill('SIGKILL');
      await new Promise((r) => other.once('exit', r));
    }
    // Now that pid is gone: the file is stale.
    lockDataDir(dir)();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
