/**
 * Reading the end of a VM's console log from its files (src/vm/log-rotation.ts): across the cut
 * that rotation makes, bounded, and refusing what a planted file could be (a link, a FIFO).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { appendFileSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LOG_MAX_BYTES, readRotatedLogEnd, rotateLog } from '../../src/vm/log-rotation.js';
import { consoleLogOf } from '../../src/core/console-log.js';

function withDir(work: (dir: string) => void): void {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-serial-'));
  try {
    work(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Numbered lines, so that any slice of them says where it came from. */
const lines = (from: number, to: number): string => Array.from({ length: to - from }, (_, i) => `line ${String(from + i).padStart(8, '0')}\n`).join('');

test('a log that was never cut: its end, and whether there is more', () => {
  withDir((dir) => {
    const log = join(dir, 'serial.log');
    writeFileSync(log, lines(0, 100));
    const all = readRotatedLogEnd(log, 1 << 20)!;
    assert.equal(all.bytes.toString(), lines(0, 100));
    assert.equal(all.truncated, false);
    const end = readRotatedLogEnd(log, 14)!;
    assert.equal(end.bytes.toString(), lines(99, 100));
    assert.equal(end.truncated, true);
  });
});

test('across a cut: the kept part of the old log, then the new one, with nothing repeated or reordered', () => {
  withDir((dir) => {
    const log = join(dir, 'serial.log');
    const perLine = lines(0, 1).length;
    const before = Math.ceil((LOG_MAX_BYTES + 1) / perLine);
    writeFileSync(log, lines(0, before));
    assert.equal(rotateLog(log), true);
    appendFileSync(log, lines(before, before + 10));
    const kept = readRotatedLogEnd(log, 1 << 20)!;
    const text = kept.bytes.toString();
    // All of the new log, preceded by the end of the old one, in order.
    assert.ok(text.endsWith(lines(before - 100, before + 10)));
    assert.equal(kept.truncated, true, 'the cut dropped the start of the old log');
    // Asking for less than the new log holds reads only from it.
    const small = readRotatedLogEnd(log, perLine * 3)!;
    assert.equal(small.bytes.toString(), lines(before + 7, before + 10));
    assert.equal(small.truncated, true);
    // Exactly the new log: the old one's part is still there, so there is more.
    const exact = readRotatedLogEnd(log, perLine * 10)!;
    assert.equal(exact.bytes.toString(), lines(before, before + 10));
    assert.equal(exact.truncated, true);
    // Spanning both, within the bound.
    const both = readRotatedLogEnd(log, perLine * 15)!;
    assert.equal(both.bytes.toString(), lines(before - 5, before + 10));
  });
});

test('the bound holds, however large the log has grown before its cut', () => {
  withDir((dir) => {
    const log = join(dir, 'serial.log');
    writeFileSync(log, Buffer.alloc(3 * LOG_MAX_BYTES, 0x41));
    const r = readRotatedLogEnd(log, 1 << 20)!;
    assert.equal(r.bytes.length, 1 << 20);
    assert.equal(r.truncated, true);
  });
});

test('no log, a link in its place, or a FIFO: nothing is read and nothing blocks', () => {
  withDir((dir) => {
    const log = join(dir, 'serial.log');
    assert.equal(readRotatedLogEnd(log, 100), null);
    writeFileSync(join(dir, 'secret'), 'host secret\n');
    symlinkSync(join(dir, 'secret'), log);
    assert.equal(readRotatedLogEnd(log, 100), null);
    rmSync(log);
    execFileSync('mkfifo', [log]);
    assert.equal(readRotatedLogEnd(log, 100), null);
    rmSync(log);
    // A link planted as the kept part is not followed either.
    writeFileSync(log, 'new\n');
    symlinkSync(join(dir, 'secret'), `${log}.1`);
    const r = readRotatedLogEnd(log, 100)!;
    assert.equal(r.bytes.toString(), 'new\n');
    assert.ok(!r.bytes.toString().includes('host secret'));
  });
});

test('as text: invalid UTF-8 becomes U+FFFD, and a cut character at the start is dropped', () => {
  assert.deepEqual(consoleLogOf(Buffer.from([0x61, 0xff, 0x62]), false), { output: 'a\ufffdb', bytes: 3, truncated: false });
  const check = Buffer.from('✓'); // e2 9c 93
  assert.equal(consoleLogOf(Buffer.concat([check.subarray(1), Buffer.from('ok')]), true).output, 'ok');
  // Not cut: a stray continuation byte is the guest's own, and shown.
  assert.equal(consoleLogOf(Buffer.concat([check.subarray(2), Buffer.from('ok')]), false).output, '\ufffdok');
  // Only a character's worth is dropped: four stray bytes leave one.
  assert.equal(consoleLogOf(Buffer.from([0x80, 0x80, 0x80, 0x80, 0x61]), true).output, '\ufffda');
});
