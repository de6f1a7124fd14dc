/**
 * The gateway's DNS overrides file (VESSEL_DNS_OVERRIDES) is read at every lookup: a rewrite of
 * the same size within one tick of the file system's clock is seen, which a time-and-size stamp
 * missed (the lookup then fell through to real DNS and timed out).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { OverridesFile } from '../../src/net/resolver.js';

test('a rewrite that keeps the size and the time is seen; a missing file overrides nothing', () => {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-overrides-'));
  try {
    const file = join(dir, 'overrides');
    const replace = (text: string) => {
      writeFileSync(`${file}.next`, text);
      // The same time on both: what two writes within one tick of the clock give.
      utimesSync(`${file}.next`, 1_700_000_000, 1_700_000_000);
      renameSync(`${file}.next`, file);
    };
    const { lookup } = new OverridesFile(file);
    assert.equal(lookup('api.test'), undefined);
    replace('api.test 127.0.0.1\n');
    assert.deepEqual(lookup('api.test'), ['127.0.0.1']);
    replace('api.test 127.0.0.2\n');
    assert.deepEqual(lookup('api.test'), ['127.0.0.2']);
    replace('xyz.test 127.0.0.2\n');
    assert.equal(lookup('api.test'), undefined);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
