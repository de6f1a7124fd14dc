/**
 * What the service accepts from the agent's process (src/vm/agent-replies.ts), which may have
 * been taken over by a guest: values of their type and bounds, errors of the codes a guest request
 * ends in, and everything else as the runtime being unavailable.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { VesselError } from '../../src/core/errors.js';
import { LinkClosedError, LinkError } from '../../src/platform/part-link.js';
import { BadReply, ListingCollector, fileStatOf, outputOf, partFailure, processListOf, processStateOf, writtenOf } from '../../src/vm/agent-replies.js';
import { MAX_LISTED_ENTRIES } from '../../src/vm/guest-directories.js';

const state = {
  id: 3,
  pid: 812,
  command: 'sleep 10',
  status: 'exited',
  exitCode: 0,
  signal: null,
  pty: false,
  stdinOpen: false,
  startedAt: '2026-01-02T03:04:05.000Z',
  endedAt: '2026-01-02T03:04:15.000Z',
  stdout: { start: 0, end: 10 },
  stderr: { start: 5, end: 5 },
};

test('a process state is taken field by field, dates made again; a bad field is a bad reply', () => {
  const s = processStateOf(JSON.parse(JSON.stringify(state)));
  assert.deepEqual(s.startedAt, new Date('2026-01-02T03:04:05.000Z'));
  assert.equal(s.exitCode, 0);
  for (const bad of [
    { status: 'zombie' },
    { id: -1 },
    { id: 2 ** 33 },
    { command: 'x'.repeat(5000) },
    { startedAt: 'yesterday' },
    { stdout: { start: 10, end: 5 } },
    { pty: 'yes' },
    { exitCode: 1.5 },
  ]) {
    assert.throws(() => processStateOf({ ...state, ...bad }), BadReply, JSON.stringify(bad));
  }
  assert.throws(() => processListOf(Array.from({ length: 129 }, () => state)), BadReply, 'more processes than the agent keeps');
  assert.throws(() => processStateOf([state]), BadReply);
});

test('output chunks carry a known channel and offsets; a stat keeps the path asked for', () => {
  assert.deepEqual(outputOf([1, 100, 7], Buffer.from('x')), { channel: 'stderr', offset: 100, data: Buffer.from('x'), lost: 7 });
  for (const meta of [undefined, [2, 0, 0], [0, -1, 0], [0, 0, 'a'], [0, 0]]) assert.throws(() => outputOf(meta, Buffer.alloc(0)), BadReply);
  const stat = fileStatOf({ name: '../../etc', path: '/etc/shadow', type: 'file', size_bytes: 4, mode: 0o644, modified_at: '2026-01-02T03:04:05.000Z', uid: 0, gid: 0 }, '/root/a', 'a');
  assert.equal(stat.path, '/root/a');
  assert.equal(stat.name, 'a');
  assert.throws(() => fileStatOf({ type: 'door', size_bytes: 0, mode: 0, modified_at: '2026-01-01T00:00:00Z', uid: 0, gid: 0 }, '/x', 'x'), BadReply);
  assert.throws(() => fileStatOf({ type: 'file', size_bytes: 0, mode: 0o10000, modified_at: '2026-01-01T00:00:00Z', uid: 0, gid: 0 }, '/x', 'x'), BadReply);
  assert.equal(writtenOf(10, 10), 10);
  assert.throws(() => writtenOf(11, 10), BadReply, 'more bytes written than were allowed');
});

test("a listing's pages: their count is what they say, paths are made here, and the entries and bytes are bounded", () => {
  const page = (entries: unknown[]) => Buffer.from(JSON.stringify(entries));
  const listing = new ListingCollector('/root/');
  listing.add(2, page([['a', 'file', 1, 0o644, '2026-01-01T00:00:00.000Z'], ['b', 'directory', 0, 0o755, '2026-01-01T00:00:00.000Z']]));
  assert.deepEqual(listing.entries.map((e) => e.path), ['/root/a', '/root/b']);
  assert.throws(() => new ListingCollector('/').add(3, page([['a', 'file', 1, 0, '2026-01-01T00:00:00Z']])), BadReply, 'a page of another size than it says');
  assert.throws(() => new ListingCollector('/').add(1, Buffer.from('[[')), BadReply);
  assert.throws(() => new ListingCollector('/').add(MAX_LISTED_ENTRIES + 1, page([])), BadReply);
  const big = new ListingCollector(`/${'p'.repeat(200)}/`);
  const name = 'n'.repeat(1000);
  assert.throws(
    () => {
      for (let i = 0; i < 100; i++) big.add(200, page(Array.from({ length: 200 }, () => [name, 'file', 0, 0, '2026-01-01T00:00:00Z'])));
    },
    /over the bytes a listing may have/,
  );
});

test('errors: the codes a guest request ends in pass, anything else is unavailable', () => {
  const passed = partFailure(new LinkError('no such file', { kind: 'vessel', code: 'not_found', httpStatus: 404 }), false) as VesselError;
  assert.equal(passed.code, 'not_found');
  const big = partFailure(new LinkError('too large', { kind: 'vessel', code: 'invalid_argument', httpStatus: 413 }), false) as VesselError;
  assert.equal(big.httpStatus, 413);
  const forged = partFailure(new LinkError('token revoked', { kind: 'vessel', code: 'unauthenticated', httpStatus: 401 }), false) as VesselError;
  assert.equal(forged.code, 'unavailable', 'a part cannot make a request look unauthenticated');
  const status = partFailure(new LinkError('x', { kind: 'vessel', code: 'not_found', httpStatus: 200 }), false) as VesselError;
  assert.equal(status.httpStatus, 404, 'the status is the code’s own');
  assert.equal((partFailure(new LinkError('EPERM', { kind: 'refused' }), false) as VesselError).code, 'internal');
  assert.equal((partFailure(new LinkClosedError('the agent process exited'), false) as VesselError).code, 'unavailable');
  assert.match((partFailure(new LinkError('channel closed', { kind: 'transport' }), true) as VesselError).message, /the VM stopped/);
  assert.equal((partFailure(new LinkError('x'.repeat(100_000), { kind: 'vessel', code: 'internal', httpStatus: 500 }), false) as VesselError).message.length, 4096);
});
