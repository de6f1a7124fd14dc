/**
 * The JSON framing (QMP) against a hostile peer: messages are right however the bytes are cut,
 * work is linear in the bytes received, and a line longer than its owner allows ends the
 * connection (the caller sees an error; the process is unharmed).
 */
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { JsonStream } from '../../src/vm/json-stream.js';

const dir = mkdtempSync(join(tmpdir(), 'vessel-json-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;

/** A Unix socket server whose one connection is handed to `serve`. */
async function peer(serve: (sock: Socket) => void): Promise<{ path: string; server: Server }> {
  const path = join(dir, `s${n++}.sock`);
  const server = createServer(serve);
  await new Promise<void>((r) => server.listen(path, r));
  return { path, server };
}

/** Writes `data` in pieces of `size` bytes, each in its own write (so each is its own read, mostly). */
async function writeInPieces(sock: Socket, data: Buffer, size: number): Promise<void> {
  for (let at = 0; at < data.length && !sock.destroyed; at += size) {
    if (!sock.write(data.subarray(at, at + size))) await new Promise((r) => sock.once('drain', r));
  }
}

test('messages arrive whole and in order however the stream is cut', async () => {
  await fc.assert(
    fc.asyncProperty(fc.array(fc.dictionary(fc.string({ maxLength: 5 }), fc.string({ maxLength: 40 })), { minLength: 1, maxLength: 20 }), fc.integer({ min: 1, max: 64 }), async (msgs, piece) => {
      const text = Buffer.from(msgs.map((m) => JSON.stringify(m)).join('\n') + '\n');
      const { path, server } = await peer((s) => void writeInPieces(s, text, piece).then(() => s.end()));
      const got: unknown[] = [];
      const stream = await JsonStream.connect(path, (m) => got.push(m), { maxLineBytes: () => 1 << 20 });
      await new Promise<void>((r) => stream.onClose(() => r()));
      server.close();
      assert.equal(JSON.stringify(got), JSON.stringify(msgs));
    }),
    { numRuns: 60 },
  );
});

/**
 * Counts the bytes the framing examines while `run` runs: every newline search (Buffer or string)
 * from where it starts to the end, and every byte joined into a line. Counting work rather than
 * timing it keeps the test exact on a busy machine.
 */
async function bytesExamined(run: () => Promise<void>): Promise<number> {
  let examined = 0;
  const bufferIndexOf = Buffer.prototype.indexOf;
  // The originals are kept to be called with their `this` (.call) and put back afterwards.
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const stringIndexOf = String.prototype.indexOf;
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const concat = Buffer.concat;
  Buffer.prototype.indexOf = function (this: Buffer, value: never, from?: never, enc?: never) {
    examined += this.length - (typeof from === 'number' ? Math.max(0, from) : 0);
    return bufferIndexOf.call(this, value, from, enc);
  };
  String.prototype.indexOf = function (this: string, value: string, from?: number) {
    examined += this.length - (from ?? 0);
    return stringIndexOf.call(this, value, from);
  };
  Buffer.concat = (list: readonly Uint8Array[], total?: number) => {
    const joined = concat(list, total);
    examined += joined.length;
    return joined;
  };
  try {
    await run();
  } finally {
    Buffer.prototype.indexOf = bufferIndexOf;
    String.prototype.indexOf = stringIndexOf;
    Buffer.concat = concat;
  }
  return examined;
}

test('work is linear in the bytes received: a line arriving in 512 pieces is examined about twice, not 256 times', async () => {
  const line = Buffer.concat([Buffer.from('{"return":{"out-data":"'), Buffer.alloc(8 * 1024 * 1024, 'A'), Buffer.from('"}}\n')]);
  const { path, server } = await peer((s) => void writeInPieces(s, line, 16 * 1024).then(() => s.end()));
  let got = 0;
  const examined = await bytesExamined(async () => {
    const stream = await JsonStream.connect(path, () => got++, { maxLineBytes: () => 64 * 1024 * 1024 });
    await new Promise<void>((r) => stream.onClose(() => r()));
  });
  server.close();
  assert.equal(got, 1);
  // Each piece scanned once and the line joined once is 2x; rescanning the line so far on every
  // read (the quadratic framing this replaced) is about pieces / 2 = 256x.
  assert.ok(examined <= 3 * line.length, `the framing examined ${(examined / line.length).toFixed(1)}x the line's bytes`);
});

test('a line longer than its owner allows ends the connection after that many bytes, not more', async () => {
  let written = 0;
  const flood = async (s: Socket): Promise<void> => {
    s.on('error', () => undefined);
    // One proper message, then an endless line.
    s.write('{"return": {}}\n');
    const line = Buffer.alloc(256 * 1024, 'x');
    while (!s.destroyed && written < 256 * 1024 * 1024) {
      written += line.length;
      if (!s.write(line)) await new Promise((r) => { s.once('drain', r); s.once('close', r); });
    }
  };
  const { path, server } = await peer((s) => void flood(s));
  const got: unknown[] = [];
  const stream = await JsonStream.connect(path, (m) => got.push(m), { maxLineBytes: () => 64 * 1024 });
  const err = await new Promise<Error | undefined>((r) => stream.onClose(r));
  assert.match(String(err?.message), /longer than the 65536 bytes its request allows/);
  assert.deepEqual(got, [{ return: {} }]);
  assert.ok(stream.closed);
  server.close();
  assert.ok(written < 32 * 1024 * 1024, `the client stopped reading after ${written} bytes`);
});
