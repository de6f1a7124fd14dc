/** Keys and tokens are read only from regular files that the service's user owns and no one else can read or write. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, chownSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { readPrivateFile } from '../../src/platform/private-files.js';
import { loadAdminToken, loadMasterKey } from '../../src/cli/data-dir.js';

function withDir(work: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-private-'));
  try {
    work(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test('a private file is read when only its owner, the service user, may use it', () => {
  withDir((dir) => {
    const file = join(dir, 'key');
    writeFileSync(file, 'secret\n', { mode: 0o600 });
    assert.equal(readPrivateFile(file), 'secret\n');
    chmodSync(file, 0o400);
    assert.equal(readPrivateFile(file), 'secret\n');
  });
});

test('a file others can read or write is refused, naming the file, its mode and the fix', () => {
  withDir((dir) => {
    const file = join(dir, 'key');
    writeFileSync(file, 'secret\n');
    for (const mode of [0o644, 0o640, 0o604, 0o620, 0o602]) {
      chmodSync(file, mode);
      const octal = `0${mode.toString(8)}`;
      assert.throws(() => readPrivateFile(file), (err: Error) => {
        assert.equal(err.message, `${file} has mode ${octal}: users other than its owner can use it. Run: chmod 600 ${file}`);
        return true;
      });
    }
  });
});

test('a symbolic link, a file of another user or a directory is refused', () => {
  withDir((dir) => {
    const target = join(dir, 'target');
    writeFileSync(target, 'secret\n', { mode: 0o600 });
    const link = join(dir, 'link');
    symlinkSync(target, link);
    assert.throws(() => readPrivateFile(link), new RegExp(`${link} is a symbolic link; a private file must be the file itself\\. Replace the link with the file it points to$`));

    if (process.getuid?.() === 0) {
      chownSync(target, 12345, 12345);
      assert.throws(() => readPrivateFile(target), new RegExp(`${target} is owned by uid 12345, not by this service's user \\(uid 0\\)\\. Run: chown 0 ${target}$`));
    }
    assert.throws(() => readPrivateFile(dir), /is not a regular file/);
    assert.throws(() => readPrivateFile(join(dir, 'missing')), /ENOENT/);
  });
});

test('the data directory refuses an admin token or master key that others can read', () => {
  withDir((dir) => {
    const { token } = loadAdminToken(dir, undefined);
    assert.equal(loadAdminToken(dir, undefined).token, token, 'made 0600, then read back');
    chmodSync(join(dir, 'admin-token'), 0o644);
    assert.throws(() => loadAdminToken(dir, undefined), /admin-token has mode 0644: .* Run: chmod 600 .*admin-token$/);

    const key = loadMasterKey(dir, undefined);
    assert.deepEqual(loadMasterKey(dir, undefined), key);
    chmodSync(join(dir, 'master.key'), 0o640);
    assert.throws(() => loadMasterKey(dir, undefined), /master\.key has mode 0640/);
    // Given through the environment, no file is read.
    assert.equal(loadAdminToken(dir, 'vsl_from_env').token, 'vsl_from_env');
  });
});
