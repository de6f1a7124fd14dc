/**
 * The host side of the agent protocol against a hostile guest, with no agent at all: the frame
 * decoder is right however the bytes are cut and linear in them, rejects what cannot be a frame,
 * the resync scanner finds our nonce behind any garbage, and the client ends the channel (every
 * pending call rejected, the process unharmed) on a malformed frame, an unknown type, credit
 * overrun or a truncated header, while it drops frames for streams it does not know.
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { AgentClient, AgentClosedError, AgentProtocolError } from '../../src/vm/agent/agent-client.js';
import {
  FLAG_EOF,
  FrameDecoder,
  HEADER_BYTES,
  MAX_PAYLOAD,
  R,
  RESYNC_FILL_BYTES,
  ResyncScanner,
  SYNC_MAGIC,
  T,
  encodeFrame,
  retainable,
  type Frame,
} from '../../src/vm/agent/frames.js';
import { MAX_PROC_COMMAND_BYTES, PROC_INFO_BYTES } from '../../src/vm/agent/messages.js';

const dir = mkdtempSync(join(tmpdir(), 'vessel-agent-frames-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

function decodeAll(bytes: Buffer, piece: number): Frame[] {
  const frames: Frame[] = [];
  const d = new FrameDecoder((f) => frames.push({ ...f, payload: Buffer.from(f.payload) }));
  for (let at = 0; at < bytes.length; at += piece) d.push(bytes.subarray(at, at + piece));
  return frames;
}

test('frames decode whole and in order however the stream is cut', () => {
  const types = [R.OUTPUT, R.DATA, R.END, R.ERROR, R.PROC, R.WINDOW];
  fc.assert(
    fc.property(
      fc.array(fc.record({ type: fc.constantFrom(...types), stream: fc.integer({ min: 0, max: 0xffffffff }), flags: fc.integer({ min: 0, max: 255 }), payload: fc.uint8Array({ maxLength: 300 }) }), { minLength: 1, maxLength: 20 }),
      fc.integer({ min: 1, max: 200 }),
      (frames, piece) => {
        const bytes = Buffer.concat(frames.map((f) => encodeFrame(f.type, f.stream, Buffer.from(f.payload), f.flags)));
        const got = decodeAll(bytes, piece);
        assert.deepEqual(
          got.map((f) => [f.type, f.stream, f.flags, f.payload.toString('hex')]),
          frames.map((f) => [f.type, f.stream, f.flags, Buffer.from(f.payload).toString('hex')]),
        );
      },
    ),
    { numRuns: 200 },
  );
});

test('decoding is linear: a maximal frame fed one byte at a time copies it once', () => {
  const frame = encodeFrame(R.DATA, 7, Buffer.alloc(MAX_PAYLOAD, 0x61));
  let copied = 0;
  const copy = Buffer.prototype.copy;
  Buffer.prototype.copy = function (this: Buffer, ...args: Parameters<Buffer['copy']>) {
    const n = copy.apply(this, args);
    copied += n;
    return n;
  };
  try {
    const got = decodeAll(frame, 1);
    assert.equal(got.length, 1);
    assert.equal(got[0]!.payload.length, MAX_PAYLOAD);
  } finally {
    Buffer.prototype.copy = copy;
  }
  // The header is copied while it is incomplete (at most 12 bytes per push, 12 pushes), then the
  // frame once, plus the test's own copy of the payload.
  assert.ok(copied <= 2 * frame.length + HEADER_BYTES * HEADER_BYTES, `copied ${copied} bytes for a ${frame.length}-byte frame`);
});

test('malformed frames are rejected at once, and the decoder stays failed', () => {
  const cases: Array<[string, Buffer]> = [
    ['oversized length', Buffer.from([0x56, R.DATA, 0, 0, 1, 0, 0, 0, 0x01, 0x00, 0x01, 0x00])],
    ['unknown type', encodeFrame(0x7f, 1)],
    ['a host-only type', encodeFrame(T.SPAWN, 1)],
    ['bad magic', Buffer.from([0x57, R.END, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0x0a])],
    ['reserved byte set', Buffer.from([0x56, R.END, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0x0a])],
    ['wrong end byte', Buffer.concat([encodeFrame(R.END, 1).subarray(0, HEADER_BYTES), Buffer.from([0xff])])],
  ];
  for (const [what, bytes] of cases) {
    const d = new FrameDecoder(() => assert.fail(`${what}: no frame expected`));
    assert.throws(() => d.push(bytes), AgentProtocolError, what);
    assert.throws(() => d.push(encodeFrame(R.END, 1)), AgentProtocolError, `${what}: still failed`);
  }
  // An oversized length is refused from the header alone: nothing waits for 16 MiB to arrive.
  const d = new FrameDecoder(() => undefined);
  const header = Buffer.alloc(HEADER_BYTES);
  header[0] = 0x56;
  header[1] = R.DATA;
  header.writeUInt32LE(16 * 1024 * 1024, 8);
  assert.throws(() => d.push(header), /exceeds/);
});

test('the resync scanner finds our HELLO_ACK behind any stale bytes, and gives up past its cap', () => {
  const nonce = Buffer.from('0123456789abcdef');
  const ack = encodeFrame(R.HELLO_ACK, 0, Buffer.concat([nonce, Buffer.alloc(24)]));
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 3000 }), fc.integer({ min: 1, max: 97 }), (garbage, piece) => {
      // A decoy: the nonce behind a header that is not a HELLO_ACK on stream 0.
      const decoy = Buffer.concat([encodeFrame(R.OUTPUT, 5, Buffer.alloc(12)).subarray(0, HEADER_BYTES), nonce]);
      const stream = Buffer.concat([Buffer.from(garbage), decoy, ack, encodeFrame(R.END, 3)]);
      const s = new ResyncScanner(nonce, 1 << 20);
      let found: Buffer | null = null;
      const rest: Buffer[] = [];
      for (let at = 0; at < stream.length; at += piece) {
        const chunk = stream.subarray(at, at + piece);
        if (found === null) found = s.push(chunk);
        else rest.push(chunk);
      }
      assert.ok(found !== null);
      assert.ok(Buffer.concat([found, ...rest]).equals(Buffer.concat([ack, encodeFrame(R.END, 3)])));
    }),
    { numRuns: 200 },
  );
  const s = new ResyncScanner(nonce, 1000);
  assert.throws(() => s.push(Buffer.alloc(2000)), AgentProtocolError);
});

test('the resync preamble: filler long enough to close any frame, then the magic', () => {
  assert.equal(RESYNC_FILL_BYTES, HEADER_BYTES + MAX_PAYLOAD + 1 + HEADER_BYTES);
  assert.equal(SYNC_MAGIC.length, 8);
  assert.equal(SYNC_MAGIC.indexOf(SYNC_MAGIC[0]!, 1), -1, 'the first byte occurs once, so a restartable scan finds it');
  assert.equal(FLAG_EOF, 1);
});

/**
 * A fake agent: answers the handshake, then `serve` scripts the rest. Returns a connected client.
 */
async function fakeAgent(serve: (sock: Socket, frames: Frame[]) => void): Promise<{ client: AgentClient; server: Server }> {
  const path = join(dir, `fake-${n++}.sock`);
  const server = createServer((sock) => {
    let handshaken = false;
    let pending = Buffer.alloc(0);
    const frames: Frame[] = [];
    const decoder = new FrameDecoder((f) => {
      frames.push(f);
      serve(sock, frames);
    }, new Set(Object.values(T)));
    sock.on('data', (chunk: Buffer) => {
      if (!handshaken) {
        pending = Buffer.concat([pending, chunk]);
        const at = pending.indexOf(SYNC_MAGIC);
        const helloEnd = at + SYNC_MAGIC.length + HEADER_BYTES + 20 + 1;
        if (at < 0 || pending.length < helloEnd) return;
        const nonce = pending.subarray(at + SYNC_MAGIC.length + HEADER_BYTES + 4, at + SYNC_MAGIC.length + HEADER_BYTES + 20);
        handshaken = true;
        // Stale bytes first, half a frame included, as a real channel may hold.
        sock.write(Buffer.concat([Buffer.from('stale garbage'), encodeFrame(R.OUTPUT, 9, Buffer.alloc(100)).subarray(0, 50)]));
        sock.write(encodeFrame(R.HELLO_ACK, 0, Buffer.concat([nonce, Buffer.alloc(24)])));
        chunk = pending.subarray(helloEnd);
      }
      try {
        decoder.push(chunk);
      } catch {
        sock.destroy();
      }
    });
    sock.on('error', () => undefined);
  });
  await new Promise<void>((resolve) => server.listen(path, resolve));
  return { client: await AgentClient.connect(path), server };
}

test('frames for unknown streams are dropped; the channel goes on', async () => {
  const { client, server } = await fakeAgent((sock, frames) => {
    const f = frames.at(-1)!;
    if (f.type !== T.PING) return;
    sock.write(encodeFrame(R.END, 999, Buffer.from('for nobody')));
    sock.write(encodeFrame(R.OUTPUT, 12345, Buffer.alloc(20)));
    sock.write(encodeFrame(R.END, f.stream, f.payload));
  });
  await client.ping();
  await client.ping();
  assert.equal(client.closed, false);
  client.close();
  server.close();
});

for (const [what, reply] of [
  ['an oversized length', (id: number) => Buffer.from([0x56, R.END, 0, 0, id, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f])],
  ['an unknown type', (id: number) => encodeFrame(0x42, id)],
  ['a type the stream cannot carry', (id: number) => encodeFrame(R.OUTPUT, id, Buffer.alloc(20))],
  ['a malformed payload', (id: number) => encodeFrame(R.STAT, id, Buffer.alloc(3))],
  ['an ERROR on stream 0', () => encodeFrame(R.ERROR, 0, Buffer.alloc(8))],
  ['a truncated header, then the end', (id: number) => encodeFrame(R.END, id).subarray(0, 7)],
] as const) {
  test(`${what} ends the channel: pending calls reject, the service goes on`, async () => {
    const { client, server } = await fakeAgent((sock, frames) => {
      const f = frames.at(-1)!;
      if (f.type === T.PING) return; // the second call never gets an answer
      sock.write(reply(f.stream));
      if (what.startsWith('a truncated')) sock.end();
    });
    const closed = new Promise<Error>((resolve) => client.onClose(resolve));
    const waiting = client.ping({ timeoutMs: 60_000 });
    const stat = client.stat('/x');
    await assert.rejects(stat, what.startsWith('a truncated') ? AgentClosedError : AgentProtocolError);
    await assert.rejects(waiting);
    assert.equal(client.closed, true);
    assert.ok((await closed) instanceof Error);
    await assert.rejects(client.ping(), AgentClosedError, 'calls after the end fail at once');
    server.close();
  });
}

test('a guest that sends more than its credit ends the channel', async () => {
  const { client, server } = await fakeAgent((sock, frames) => {
    const f = frames.at(-1)!;
    if (f.type !== T.READ_FILE) return;
    sock.write(encodeFrame(R.STAT, f.stream, Buffer.alloc(32, 0).fill(1, 0, 1)));
    const window = f.payload.readUInt32LE(0);
    sock.write(encodeFrame(R.DATA, f.stream, Buffer.alloc(window)));
    sock.write(encodeFrame(R.DATA, f.stream, Buffer.alloc(1)));
  });
  const { stream } = await client.readFile('/x', { window: 4096 });
  await assert.rejects(
    (async () => {
      for await (const _ of stream) void _;
    })(),
    /credit/,
  );
  assert.equal(client.closed, true);
  server.close();
});

test('an OUTPUT offset that goes backwards ends the channel', async () => {
  const { client, server } = await fakeAgent((sock, frames) => {
    const f = frames.at(-1)!;
    if (f.type !== T.SPAWN) return;
    const info = Buffer.alloc(68);
    info.writeUInt32LE(1, 0);
    info[8] = 1;
    sock.write(encodeFrame(R.PROC, f.stream, info));
    const out = (offset: number) => {
      const b = Buffer.alloc(16);
      b[0] = 1;
      b.writeBigUInt64LE(BigInt(offset), 4);
      return encodeFrame(R.OUTPUT, f.stream, b);
    };
    sock.write(Buffer.concat([out(10), out(0)]));
  });
  const proc = client.spawn({ argv: ['x'] });
  await assert.rejects(
    (async () => {
      for await (const _ of proc) void _;
    })(),
    /goes back/,
  );
  await assert.rejects(proc.done);
  server.close();
});

/** A PROC payload: the fixed part (running, id 1) and a command summary of `commandBytes`. */
function procPayload(commandBytes: number): Buffer {
  const info = Buffer.alloc(PROC_INFO_BYTES + commandBytes, 0x61);
  info.fill(0, 0, PROC_INFO_BYTES);
  info.writeUInt32LE(1, 0);
  info[8] = 1;
  return info;
}

test('a PROC longer than its fixed part and a 256-byte command ends the channel', async () => {
  const { client, server } = await fakeAgent((sock, frames) => {
    const f = frames.at(-1)!;
    if (f.type === T.SPAWN) sock.write(encodeFrame(R.PROC, f.stream, procPayload(MAX_PROC_COMMAND_BYTES + 1)));
  });
  const proc = client.spawn({ argv: ['x'] });
  await assert.rejects(proc.info, /PROC payload/);
  assert.equal(client.closed, true);
  server.close();
});

/** An agent that answers LIST_PROCS with `count` processes, each with a full command summary. */
const listingAgent = (count: number) =>
  fakeAgent((sock, frames) => {
    const f = frames.at(-1)!;
    if (f.type !== T.LIST_PROCS) return;
    const proc = encodeFrame(R.PROC, f.stream, procPayload(MAX_PROC_COMMAND_BYTES));
    sock.write(Buffer.concat([...Array.from({ length: count }, () => proc), encodeFrame(R.END, f.stream)]));
  });

test('a process list of more processes than the agent keeps ends the channel', async () => {
  const { client, server } = await listingAgent(129);
  await assert.rejects(client.listProcesses(), AgentProtocolError);
  assert.equal(client.closed, true);
  server.close();
});

test('128 processes with full command summaries are a valid list', async () => {
  const { client, server } = await listingAgent(128);
  const list = await client.listProcesses();
  assert.equal(list.length, 128);
  assert.equal(list[0]!.command, 'a'.repeat(MAX_PROC_COMMAND_BYTES));
  client.close();
  server.close();
});

test('a kept payload never pins a read much larger than itself', () => {
  const read = Buffer.alloc(64 * 1024, 7);
  const small = read.subarray(100, 200);
  const keptSmall = retainable(small);
  assert.deepEqual(keptSmall, small);
  assert.notEqual(keptSmall.buffer, read.buffer, 'a small view is copied out');
  const large = read.subarray(13, 13 + 60 * 1024);
  assert.equal(retainable(large).buffer, read.buffer, 'most of a read is kept as it is');
});
