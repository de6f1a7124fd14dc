/**
 * Every reply of the agent is bounded in bytes (docs/agent-protocol.md, "Limits"), against a
 * scripted hostile agent that speaks the real frames (test/support/agent-fake.ts) and keeps to
 * its credit, as a replaced agent must to go unnoticed: a listing of 64 KiB names or of endless
 * entries, a process list past its 128 processes, times the API cannot show as they came, an
 * oversized ERROR or END. Each fails that request with the API's error, the fake agent gets no
 * further than the bound lets it (its bytes are counted), and the same client, or the reconnect
 * the driver makes after a reset channel, serves the next request.
 */
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { VesselError } from '../../src/core/errors.js';
import { AgentError, DEFAULT_WINDOW, type AgentClient } from '../../src/vm/agent/agent-client.js';
import { MAX_PAYLOAD, R, T, encodeFrame, type Frame } from '../../src/vm/agent/frames.js';
import { ErrorKind, MAX_ERROR_TEXT, NAME_MAX, decodeStat, guestDate } from '../../src/vm/agent/messages.js';
import { MAX_LISTING_BYTES, listGuestDir, makeGuestDir, statGuestPath } from '../../src/vm/guest-directories.js';
import { listProcesses } from '../../src/vm/guest-processes.js';
import { FakeAgent, badRequest, dirPayload, errorPayload, procPayload, requestPath, statPayload, type FakeConnection } from '../support/agent-fake.js';

const dir = mkdtempSync(join(tmpdir(), 'vessel-agent-bounds-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** Where a fake agent stops on its own: far past every bound, short of hurting the old code's test run. */
const GIVE_UP_BYTES = 64 * 1024 * 1024;
const EACCES = 13;
const I64_MIN_BITS = 1n << 63n;
const MINUS_ONE_BITS = (1n << 64n) - 1n;

/** `err` is a VesselError of this code whose message matches. */
function isRefusal(err: unknown, code: string, message: RegExp): void {
  assert.ok(err instanceof VesselError, `not an API error: ${String(err)}`);
  assert.equal(err.code, code, err.message);
  assert.match(err.message, message);
}

/** Rejects with a VesselError of this code whose message matches. */
async function refused(work: Promise<unknown>, code: string, message: RegExp): Promise<void> {
  await assert.rejects(work, (err: unknown) => (isRefusal(err, code, message), true));
}

/** What `work` rejects with, or fails. */
const failureOf = (work: Promise<unknown>): Promise<unknown> =>
  work.then(
    () => assert.fail('expected a rejection'),
    (err: unknown) => err,
  );

/**
 * Bytes of DIR payload sent so far on each listing's stream, by path. The fake keeps to its
 * credit, so whenever it is read this is at most what the host took plus its window: no need to
 * wait for the fake to notice it was stopped.
 */
const sentFor = new Map<string, number>();

/** Sends `payload` as DIR frames within the stream's credit until the host stops it (or GIVE_UP_BYTES). */
async function streamDir(c: FakeConnection, f: Frame, payload: Buffer): Promise<void> {
  const path = requestPath(f);
  c.grant(f.stream, f.payload.readUInt32LE(0));
  sentFor.set(path, 0);
  const frame = encodeFrame(R.DIR, f.stream, payload);
  while (sentFor.get(path)! < GIVE_UP_BYTES) {
    if (!(await c.spend(f.stream, payload.length))) return;
    sentFor.set(path, sentFor.get(path)! + payload.length);
    if (!(await c.write(frame))) return;
  }
  await c.write(encodeFrame(R.END, f.stream));
}

/** The honest answers every scenario's agent also gives: a small listing of /ok, a PING. */
async function honest(f: Frame, c: FakeConnection): Promise<boolean> {
  if (f.type === T.PING) await c.write(encodeFrame(R.END, f.stream, f.payload));
  else if (f.type === T.LIST_DIR && requestPath(f) === '/ok') {
    await c.write(encodeFrame(R.DIR, f.stream, dirPayload([{ name: 'b' }, { name: 'a', type: 2 }])));
    await c.write(encodeFrame(R.END, f.stream));
  } else return false;
  return true;
}

const stillServes = async (agent: () => Promise<AgentClient>) => {
  assert.deepEqual((await listGuestDir(agent, '/ok')).map((e) => [e.name, e.type, e.path]), [['a', 'directory', '/ok/a'], ['b', 'file', '/ok/b']]);
};

let fake: FakeAgent;

before(async () => {
  fake = await FakeAgent.start(dir, 'hostile', async (f, c) => {
    if (await honest(f, c)) return;
    const path = requestPath(f);
    if (f.type === T.LIST_DIR && path === '/huge-names') {
      // One entry per frame, its name 64 KiB: what filled the service's heap.
      await streamDir(c, f, dirPayload([{ name: Buffer.alloc(MAX_PAYLOAD - 24, 0x61) }]));
    } else if (f.type === T.LIST_DIR && path === '/endless') {
      // Valid entries, the longest names there are, without end.
      const names = Array.from({ length: Math.floor(MAX_PAYLOAD / (24 + NAME_MAX)) }, (_, i) => ({ name: `${i}`.padEnd(NAME_MAX, 'x') }));
      await streamDir(c, f, dirPayload(names));
    } else if (f.type === T.LIST_DIR && path.startsWith('/name/')) {
      const name = Buffer.from(path.slice('/name/'.length), 'hex');
      await c.write(encodeFrame(R.DIR, f.stream, dirPayload([{ name: 'fine' }, { name }])));
      await c.write(encodeFrame(R.END, f.stream));
    } else if (f.type === T.LIST_DIR && path === '/times') {
      const bits = [0n, I64_MIN_BITS, MINUS_ONE_BITS, I64_MIN_BITS - 1n];
      await c.write(encodeFrame(R.DIR, f.stream, dirPayload(bits.map((mtimeBits, i) => ({ name: `t${i}`, mtimeBits })))));
      await c.write(encodeFrame(R.END, f.stream));
    } else if (f.type === T.STAT && path.startsWith('/mtime/')) {
      await c.write(encodeFrame(R.STAT, f.stream, statPayload({ mtimeBits: BigInt(path.slice('/mtime/'.length)) })));
      await c.write(encodeFrame(R.END, f.stream));
    } else if (f.type === T.STAT && path === '/long-error') {
      await c.write(encodeFrame(R.ERROR, f.stream, errorPayload(ErrorKind.ERRNO, EACCES, Buffer.alloc(MAX_PAYLOAD - 8, 0x7a))));
    } else if (f.type === T.MKDIR && path === '/end-with-payload') {
      await c.write(encodeFrame(R.END, f.stream, Buffer.alloc(MAX_PAYLOAD, 1)));
    } else await c.write(badRequest(f));
  });
});
after(() => fake.stop());

test('a listing of 64 KiB names is refused at its first entry: the channel is reset, a reconnect serves', async (t) => {
  const agent = fake.reconnecting();
  const first = await agent();
  const err = await listGuestDir(agent, '/huge-names').catch((e: unknown) => e);
  // What the guest got into the host before it was stopped: one window, not 49k names.
  assert.ok(sentFor.get('/huge-names')! <= DEFAULT_WINDOW, `the agent sent ${sentFor.get('/huge-names')} bytes of names`);
  t.diagnostic(`the agent got ${sentFor.get('/huge-names')} bytes of names sent`);
  isRefusal(err, 'unavailable', /broke the protocol.*name of 65512 bytes; a name is 1 to 255 \(NAME_MAX\)/);
  assert.equal(first.closed, true, 'the channel that carried the lie is ended');
  await stillServes(agent);
  assert.notEqual(await agent(), first);
});

test('an endless listing of valid entries stops at the byte budget; the same channel serves on', async (t) => {
  const agent = fake.reconnecting();
  const client = await agent();
  const err = await failureOf(listGuestDir(agent, '/endless'));
  const sent = sentFor.get('/endless')!;
  // The budget, plus at most what the stream's credit let the agent send ahead of the reader.
  assert.ok(sent <= MAX_LISTING_BYTES + DEFAULT_WINDOW + MAX_PAYLOAD, `the agent sent ${sent} bytes of entries`);
  t.diagnostic(`the agent got ${sent} bytes of entries sent`);
  isRefusal(err, 'failed_precondition', /directory '\/endless' is too large to list \(over 16777216 bytes of names and paths\); download it as an archive/);
  assert.equal(client.closed, false, 'a big directory is no lie: the channel goes on');
  await stillServes(agent);
  assert.equal(await agent(), client);
});

test('a name over NAME_MAX, with a slash or a NUL, or . or .., is refused; 255 bytes is a name', async () => {
  const agent = fake.reconnecting();
  const hex = (b: Buffer) => b.toString('hex');
  const longest = Buffer.alloc(NAME_MAX, 0x6e);
  const ok = await listGuestDir(agent, `/name/${hex(longest)}`);
  assert.deepEqual(ok.map((e) => e.name.length), [4, NAME_MAX]);
  for (const [what, name, why] of [
    ['256 bytes', Buffer.alloc(NAME_MAX + 1, 0x6e), /name of 256 bytes/],
    ['a slash', Buffer.from('../../etc/passwd'), /contains '\/' or NUL/],
    ['a NUL', Buffer.from('a\0b'), /contains '\/' or NUL/],
    ['.', Buffer.from('.'), /DIR entry '\.'/],
    ['..', Buffer.from('..'), /DIR entry '\.\.'/],
  ] as const) {
    await refused(listGuestDir(agent, `/name/${hex(name)}`), 'unavailable', why).catch((err: Error) => assert.fail(`${what}: ${err.message}`));
  }
  await stillServes(agent);
});

test('guest times are signed nanoseconds: any 64 bits are a valid RFC 3339 time, never an Invalid Date', async () => {
  const agent = fake.reconnecting();
  const at = async (bits: bigint) => (await statGuestPath(agent, `/mtime/${bits}`, true)).modified_at;
  // 2^63 as the agent sends it is i64's minimum: the earliest time there is, not 2262.
  assert.equal(await at(I64_MIN_BITS), '1677-09-21T00:12:43.145Z');
  // All ones is one nanosecond before the epoch (a file of 1969), not 2554; rounded down.
  assert.equal(await at(MINUS_ONE_BITS), '1969-12-31T23:59:59.999Z');
  assert.equal(await at(I64_MIN_BITS - 1n), '2262-04-11T23:47:16.854Z');
  assert.equal(await at(0n), '1970-01-01T00:00:00.000Z');
  const listed = await listGuestDir(agent, '/times');
  assert.deepEqual(listed.map((e) => e.modified_at), ['1970-01-01T00:00:00.000Z', '1677-09-21T00:12:43.145Z', '1969-12-31T23:59:59.999Z', '2262-04-11T23:47:16.854Z']);
  // Over every bit pattern: a time the API's date-time format takes.
  fc.assert(
    fc.property(fc.bigInt({ min: 0n, max: MINUS_ONE_BITS }), (bits) => {
      const iso = guestDate(decodeStat(statPayload({ mtimeBits: bits })).mtimeNs).toISOString();
      assert.match(iso, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    }),
    { numRuns: 2000 },
  );
  assert.throws(() => guestDate(10n ** 25n), /out of range/, 'wider than the protocol: refused, not an Invalid Date');
});

test('a process list past 128 processes is refused within 128 frames; a reconnect serves', async (t) => {
  let sent = 0;
  const procs = await FakeAgent.start(dir, 'procs', async (f, c) => {
    if (await honest(f, c)) return;
    if (f.type !== T.LIST_PROCS) return void (await c.write(badRequest(f)));
    // No credit governs a process list: the host's count of PROC frames and their size are its bound.
    for (let id = 1; sent < GIVE_UP_BYTES; id++) {
      const frame = encodeFrame(R.PROC, f.stream, procPayload({ id, command: 'x'.repeat(256) }));
      if (!(await c.write(frame))) return;
      sent += frame.length;
    }
    await c.write(encodeFrame(R.END, f.stream));
  });
  try {
    const agent = procs.reconnecting();
    await refused(listProcesses(agent), 'unavailable', /broke the protocol.*frame type 0x86 \(number 129\)/);
    // 128 PROCs of 337 bytes are 42 KiB; what the socket buffers between us is the rest (the
    // fake writes only as fast as the socket takes, and the host has closed it).
    assert.ok(sent < 4 * 1024 * 1024, `the agent got ${sent} bytes of processes written`);
    t.diagnostic(`the agent got ${sent} bytes of processes written`);
    await stillServes(agent);
  } finally {
    await procs.stop();
  }
});

test('a process that started before 1970 (past 2262, read unsigned) is a lie: refused, a reconnect serves', async () => {
  const procs = await FakeAgent.start(dir, 'proc-times', async (f, c) => {
    if (await honest(f, c)) return;
    if (f.type !== T.LIST_PROCS) return void (await c.write(badRequest(f)));
    await c.write(encodeFrame(R.PROC, f.stream, procPayload({ id: 1 })));
    await c.write(encodeFrame(R.PROC, f.stream, procPayload({ id: 2, startBits: I64_MIN_BITS })));
    await c.write(encodeFrame(R.END, f.stream));
  });
  try {
    const agent = procs.reconnecting();
    await refused(listProcesses(agent), 'unavailable', /PROC start time -9223372036854775808 ns is before 1970/);
    await stillServes(agent);
  } finally {
    await procs.stop();
  }
});

test('an ERROR keeps 200 bytes of its message; an END where none belongs resets the channel', async () => {
  const agent = fake.reconnecting();
  await assert.rejects((await agent()).stat('/long-error'), (err: unknown) => {
    assert.ok(err instanceof AgentError);
    assert.equal(Buffer.byteLength(err.detail), MAX_ERROR_TEXT);
    return true;
  });
  await refused(statGuestPath(agent, '/long-error', true), 'failed_precondition', /^'\/long-error' cannot be accessed: z{200}$/);
  const client = await agent();
  await refused(makeGuestDir(agent, '/end-with-payload'), 'unavailable', /an END of 65536 bytes answering request 0x24, which allows 0/);
  assert.equal(client.closed, true);
  await stillServes(agent);
});

test('a path over 4095 bytes is refused before it is sent', async () => {
  const agent = fake.reconnecting();
  const requests = fake.connections.length;
  await refused(listGuestDir(agent, `/${'p'.repeat(4095)}`), 'invalid_argument', /too long for the guest/);
  await refused(statGuestPath(agent, `/${'é'.repeat(2048)}`, true), 'invalid_argument', /too long for the guest/);
  assert.ok((await listGuestDir(agent, '/ok')).length === 2);
  assert.equal(fake.connections.length, requests + 1, 'one connection, no reset');
});
