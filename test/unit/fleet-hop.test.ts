/** The API node → VM host hop's signature (src/cluster/hop.ts) and body binding (hop-body.ts): what they cover, and what they refuse. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { Readable, type Transform } from 'node:stream';
import { HOP_BODY, HOP_PRINCIPAL, HOP_SIGNATURE, HOP_TIME, SeenHops, bodyKeyOf, decodeMac, signHop, verifyHop, type VerifiedHop } from '../../src/cluster/hop.js';
import { BodyFramer, BodyUnframer, FRAMED_BODY, MAX_FRAME_BYTES, NO_BODY, WholeBodyCheck, frameKey, wholeBody } from '../../src/cluster/hop-body.js';
import type { Principal } from '../../src/core/types.js';

const SECRET = 'a'.repeat(48);
const principal: Principal = { tokenId: 'tok-1', tenantId: 'acme', scopes: new Set(['runtimes:read', 'exec']) };
const req = { method: 'POST', url: '/v1/runtimes/web/exec?x=1', requestId: 'abc-1', node: 'host-1' };
const NOW = 1_800_000_000_000;

const sign = (body = NO_BODY, r = req, now = NOW) => signHop(SECRET, principal, { ...r, body }, now);
const accepted = (got: VerifiedHop | string): VerifiedHop => {
  if (typeof got === 'string') assert.fail(got);
  return got;
};

/** What a readable gives: the bytes it handed on, and its error if it failed. */
function drain(readable: Readable): Promise<{ out: Buffer; err: Error | null }> {
  const out: Buffer[] = [];
  readable.on('data', (d: Buffer) => out.push(d));
  return new Promise((resolve) => {
    readable.once('end', () => resolve({ out: Buffer.concat(out), err: null }));
    readable.once('error', (err) => resolve({ out: Buffer.concat(out), err }));
  });
}

/** What a check stream gives for `chunks`, written to it one by one. */
function through(check: Transform, chunks: Buffer[]): Promise<{ out: Buffer; err: Error | null }> {
  const result = drain(check);
  for (const c of chunks) if (!check.destroyed) check.write(c);
  if (!check.destroyed) check.end();
  return result;
}

/** A body as the hop frames it, as one buffer. */
async function framed(key: Buffer, chunks: Buffer[]): Promise<Buffer> {
  const framer = new BodyFramer(key);
  const out: Buffer[] = [];
  for await (const part of Readable.from(chunks).pipe(framer)) out.push(part as Buffer);
  return Buffer.concat(out);
}

test('a signed hop gives back the principal it vouches for', () => {
  const got = accepted(verifyHop(SECRET, sign(), req, NOW + 1000));
  assert.equal(got.principal.tokenId, 'tok-1');
  assert.equal(got.principal.tenantId, 'acme');
  assert.deepEqual([...got.principal.scopes].sort(), ['exec', 'runtimes:read']);
});

test('every covered part, changed, is refused', () => {
  const headers = sign();
  const refused = (h: Record<string, string>, r = req, now = NOW) => assert.equal(typeof verifyHop(SECRET, h, r, now), 'string');
  refused(headers, { ...req, method: 'DELETE' });
  refused(headers, { ...req, url: '/v1/runtimes/other/exec?x=1' });
  refused(headers, { ...req, url: '/v1/runtimes/web/exec?x=2' });
  refused(headers, { ...req, requestId: 'abc-2' });
  refused(headers, { ...req, node: 'host-2' });
  const admin = Buffer.from(JSON.stringify({ token_id: 'tok-1', tenant_id: 'acme', scopes: ['admin'] })).toString('base64url');
  refused({ ...headers, [HOP_PRINCIPAL]: admin });
  refused({ ...headers, [HOP_TIME]: String(NOW + 1) });
  // The body it names: another digest, another length, or frames instead.
  refused({ ...headers, [HOP_BODY]: wholeBody(Buffer.from('{}')), 'content-length': '2' });
  refused({ ...headers, [HOP_BODY]: FRAMED_BODY, 'transfer-encoding': 'chunked' });
  refused(headers, req, NOW + 61_000);
  refused(headers, req, NOW - 61_000);
  assert.equal(typeof verifyHop('b'.repeat(48), headers, req, NOW), 'string', 'another cluster’s secret');
});

test('missing, malformed and oversized headers are refused without throwing', () => {
  const headers = sign();
  for (const drop of [HOP_PRINCIPAL, HOP_TIME, HOP_SIGNATURE, HOP_BODY]) {
    const h: Record<string, string> = { ...headers };
    delete h[drop];
    assert.equal(typeof verifyHop(SECRET, h, req, NOW), 'string');
  }
  const bad: Array<Record<string, string | string[]>> = [
    { ...headers, [HOP_TIME]: 'soon' },
    { ...headers, [HOP_TIME]: '9'.repeat(40) },
    { ...headers, [HOP_SIGNATURE]: '' },
    { ...headers, [HOP_SIGNATURE]: '%%%' },
    { ...headers, [HOP_PRINCIPAL]: 'x'.repeat(5000) },
    { ...headers, [HOP_PRINCIPAL]: [headers[HOP_PRINCIPAL]!, headers[HOP_PRINCIPAL]!] },
    { ...headers, [HOP_BODY]: 'whole 99999999999999999 AAAA' },
    { ...headers, [HOP_BODY]: `whole ${2 * 1024 * 1024} ${'A'.repeat(43)}` },
    { ...headers, [HOP_BODY]: 'whole 01 ' + 'A'.repeat(43) },
  ];
  for (const h of bad) assert.equal(typeof verifyHop(SECRET, h, req, NOW), 'string');
});

test('a principal with a scope this version does not know is refused, even correctly signed', () => {
  const forged = Buffer.from(JSON.stringify({ token_id: 't', tenant_id: 'acme', scopes: ['root'] })).toString('base64url');
  const headers = sign();
  // Re-sign the odd principal with the right secret: the MAC holds, the content does not.
  const sig = createHmac('sha256', SECRET).update(['vessel-hop-v2', String(NOW), 'POST', req.url, forged, req.requestId, req.node, NO_BODY].join('\n')).digest().toString('base64url');
  assert.equal(verifyHop(SECRET, { ...headers, [HOP_PRINCIPAL]: forged, [HOP_SIGNATURE]: sig }, req, NOW), 'malformed hop principal');
});

/** Other texts Node's lenient base64url decoder reads as the same 32 bytes. */
function sameMacTexts(sig: string): string[] {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';
  const last = alphabet.indexOf(sig.at(-1)!);
  // The last character carries 4 bits of the MAC and 2 that the decoder drops.
  const otherLast = sig.slice(0, -1) + alphabet[last ^ 1];
  return [`${sig}=`, `${sig}==`, `${sig}!`, `${sig.slice(0, 20)}.${sig.slice(20)}`, ` ${sig}`, otherLast];
}

test('only the one text of a MAC is taken: padding, stray characters and unused bits are refused', () => {
  const headers = sign();
  const sig = headers[HOP_SIGNATURE]!;
  assert.ok(decodeMac(sig)?.equals(Buffer.from(sig, 'base64url')));
  for (const text of sameMacTexts(sig)) {
    assert.ok(Buffer.from(text, 'base64url').equals(Buffer.from(sig, 'base64url')), `Node decodes ${JSON.stringify(text)} as the same MAC`);
    assert.equal(decodeMac(text), null, text);
    assert.equal(verifyHop(SECRET, { ...headers, [HOP_SIGNATURE]: text }, req, NOW), 'malformed hop headers', text);
  }
});

test('a hop is good once, under any text of its MAC: the same signed headers again are refused, and the memory of them is kept a window long', () => {
  const seen = new SeenHops();
  const headers = sign();
  accepted(verifyHop(SECRET, headers, req, NOW, seen));
  assert.equal(verifyHop(SECRET, headers, req, NOW + 10, seen), 'this hop was already used');
  for (const text of sameMacTexts(headers[HOP_SIGNATURE]!)) assert.equal(typeof verifyHop(SECRET, { ...headers, [HOP_SIGNATURE]: text }, req, NOW + 10, seen), 'string', text);
  // Another request (a new id) is its own hop.
  const next = { ...req, requestId: 'abc-9' };
  accepted(verifyHop(SECRET, sign(NO_BODY, next), next, NOW, seen));
  // A refused MAC is not remembered: it cannot crowd out real ones.
  const forged = { ...headers, [HOP_SIGNATURE]: Buffer.alloc(32).toString('base64url') };
  assert.equal(verifyHop(SECRET, forged, req, NOW, seen), 'the hop signature does not match');
  assert.equal(seen.firstTime(Buffer.alloc(32), NOW), true);
});

test('the HTTP framing must be the one signed: a signed body cannot be dropped or framed otherwise', () => {
  const body = Buffer.from('{"display_name":"a"}');
  const whole = sign(wholeBody(body));
  accepted(verifyHop(SECRET, { ...whole, 'content-length': String(body.length) }, req, NOW));
  assert.equal(typeof verifyHop(SECRET, whole, req, NOW), 'string', 'no Content-Length: no body at all');
  assert.equal(typeof verifyHop(SECRET, { ...whole, 'content-length': '3' }, req, NOW), 'string');
  assert.equal(typeof verifyHop(SECRET, { ...whole, 'transfer-encoding': 'chunked' }, req, NOW), 'string');
  const frames = sign(FRAMED_BODY);
  accepted(verifyHop(SECRET, { ...frames, 'transfer-encoding': 'chunked' }, req, NOW));
  assert.equal(typeof verifyHop(SECRET, frames, req, NOW), 'string', 'framed, but sent as no body');
  assert.equal(typeof verifyHop(SECRET, { ...frames, 'content-length': '0' }, req, NOW), 'string');
  // No body: none, or an empty one.
  accepted(verifyHop(SECRET, sign(), req, NOW));
  accepted(verifyHop(SECRET, { ...sign(), 'content-length': '0' }, req, NOW));
  assert.equal(typeof verifyHop(SECRET, { ...sign(), 'content-length': '5' }, req, NOW), 'string');
});

test('a body signed whole is handed on only whole and matching its digest', async () => {
  const body = Buffer.from('{"display_name":"web"}');
  const hop = accepted(verifyHop(SECRET, { ...sign(wholeBody(body)), 'content-length': String(body.length) }, req, NOW));
  const ok = await drain(hop.checkBody(Readable.from([])));
  assert.ok(ok.err !== null, 'an empty body is not the signed one');
  const good = await through(new WholeBodyCheck({ length: body.length, digest: wholeBody(body).split(' ')[2]! }), [body.subarray(0, 5), body.subarray(5)]);
  assert.deepEqual([good.err, good.out.toString()], [null, body.toString()]);
  const other = Buffer.from('{"display_name":"bad"}');
  const swapped = await through(new WholeBodyCheck({ length: body.length, digest: wholeBody(body).split(' ')[2]! }), [other]);
  assert.ok(swapped.err !== null);
  assert.equal(swapped.out.length, 0, 'nothing of a body that does not match is handed on');
  const longer = await through(new WholeBodyCheck({ length: body.length, digest: wholeBody(body).split(' ')[2]! }), [body, Buffer.from('x')]);
  assert.ok(longer.err !== null);
  assert.equal(longer.out.length, 0);
});

test('a framed body comes out as it went in, however it is cut, and each frame is checked before a byte of it is handed on', async () => {
  const key = frameKey(SECRET, randomBytes(32));
  const body = randomBytes(3 * MAX_FRAME_BYTES + 1234);
  const wire = await framed(key, [body.subarray(0, 10), body.subarray(10, 2 * MAX_FRAME_BYTES + 7), body.subarray(2 * MAX_FRAME_BYTES + 7)]);
  // Cut into 1-byte, 1000-byte and whole pieces: always the same body.
  for (const size of [1, 1000, wire.length]) {
    const pieces: Buffer[] = [];
    for (let at = 0; at < wire.length; at += size) pieces.push(wire.subarray(at, at + size));
    const got = await through(new BodyUnframer(key), pieces);
    assert.equal(got.err, null);
    assert.ok(got.out.equals(body), `cut every ${size} bytes`);
  }
  // An empty body is one last frame.
  assert.deepEqual((await through(new BodyUnframer(key), [await framed(key, [])])).out.length, 0);
});

test('a framed body changed, cut short, reordered, extended or from another hop is refused at the first frame that differs', async () => {
  const key = frameKey(SECRET, randomBytes(32));
  const body = Buffer.alloc(2 * MAX_FRAME_BYTES + 100, 'A');
  const wire = await framed(key, [body]);
  const frame = 5 + MAX_FRAME_BYTES + 32;

  const flipped = Buffer.from(wire);
  flipped[frame + 5 + 10] = 'B'.charCodeAt(0);
  const changed = await through(new BodyUnframer(key), [flipped]);
  assert.ok(changed.err !== null);
  assert.equal(changed.out.length, MAX_FRAME_BYTES, 'the first frame, checked, went on; nothing of the changed one');

  const short = await through(new BodyUnframer(key), [wire.subarray(0, wire.length - 37)]);
  assert.ok(short.err !== null, 'without its last frame a body has no end');
  assert.equal(short.out.length, body.length);

  const reordered = Buffer.concat([wire.subarray(frame, 2 * frame), wire.subarray(0, frame), wire.subarray(2 * frame)]);
  const swapped = await through(new BodyUnframer(key), [reordered]);
  assert.ok(swapped.err !== null);
  assert.equal(swapped.out.length, 0);

  const extended = await through(new BodyUnframer(key), [wire, Buffer.from('GET / HTTP/1.1\r\n\r\n')]);
  assert.ok(extended.err !== null, 'nothing may follow the last frame');

  const otherHop = await through(new BodyUnframer(frameKey(SECRET, randomBytes(32))), [wire]);
  assert.ok(otherHop.err !== null);
  assert.equal(otherHop.out.length, 0);

  // A frame claiming more than a frame may hold is refused from its head: nothing is held for it.
  const huge = Buffer.alloc(5);
  huge.writeUInt32BE(MAX_FRAME_BYTES + 1, 0);
  assert.ok((await through(new BodyUnframer(key), [huge])).err !== null);
});

test('the frames of a signed hop are keyed by its MAC and the secret', async () => {
  const headers = sign(FRAMED_BODY);
  const hop = accepted(verifyHop(SECRET, { ...headers, 'transfer-encoding': 'chunked' }, req, NOW));
  const body = Buffer.from('stdin bytes');
  const wire = await framed(bodyKeyOf(SECRET, headers), [body]);
  const got = await drain(hop.checkBody(Readable.from([wire])));
  assert.equal(got.err, null);
  assert.equal(got.out.toString(), 'stdin bytes');
  // Keyed by the MAC alone (which travels in the clear), the frames are refused.
  const byMac = await framed(Buffer.from(headers[HOP_SIGNATURE]!, 'base64url'), [body]);
  const hop2 = accepted(verifyHop(SECRET, { ...headers, 'transfer-encoding': 'chunked' }, req, NOW));
  assert.ok((await drain(hop2.checkBody(Readable.from([byMac])))).err !== null);
});
