/**
 * How a hop's request body is bound to its signature (docs/scaling.md, "The hop"). The signed
 * headers name the body in one of two ways, and the name is inside the MAC (hop.ts):
 *
 * - `whole <length> <sha256>`: a body the API node holds whole before it sends (a create's JSON,
 *   and every empty body). The host holds it (at most MAX_WHOLE_BODY_BYTES) and hands it on only
 *   once its length and digest match.
 * - `frames`: a streamed body (a gigabyte file, a process's stdin) the API node cannot digest before
 *   it sends without holding all of it. It goes as frames of at most MAX_FRAME_BYTES, each with an
 *   HMAC under a key only holders of the cluster secret can derive from this hop's MAC, over its
 *   position, its length, whether it is the last, and its bytes. The host checks each frame before
 *   it hands on a byte of it, and a body that ends without its last frame is an error, never an
 *   end. So the host acts only on bytes the API node sent under this very hop, in their order;
 *   at most one frame is held. A trailer digest was the other choice: it is checked only once the
 *   whole body is in, so the host would have had to hold (or spool) a gigabyte first, or act on
 *   bytes not yet checked.
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { Transform, type Readable, type TransformCallback } from 'node:stream';
import { VesselError } from '../core/errors.js';

/** The largest body sent whole: the API's JSON limit, which bounds what an API node reads to place a create. */
export const MAX_WHOLE_BODY_BYTES = 1024 * 1024;
/** The largest frame's data: what a host holds of a streamed body before it checks it. */
export const MAX_FRAME_BYTES = 64 * 1024;
/** A frame: its data's length (4 bytes), its flags (1), the data, then its HMAC (32). */
const FRAME_HEAD_BYTES = 5;
const FRAME_MAC_BYTES = 32;
const LAST = 1;

export const FRAMED_BODY = 'frames';
const WHOLE = /^whole (0|[1-9]\d{0,15}) ([A-Za-z0-9_-]{43})$/;

/** How a body the sender holds whole is named in the signed headers. */
export const wholeBody = (bytes: Buffer): string => `whole ${bytes.length} ${createHash('sha256').update(bytes).digest('base64url')}`;
export const NO_BODY = wholeBody(Buffer.alloc(0));

export type BodyName = { kind: 'whole'; length: number; digest: string } | { kind: 'frames' };

/** The body named by the signed header, or null when it names none we send. */
export function parseBodyName(text: string): BodyName | null {
  if (text === FRAMED_BODY) return { kind: 'frames' };
  const m = WHOLE.exec(text);
  if (m === null) return null;
  const length = Number(m[1]);
  return length <= MAX_WHOLE_BODY_BYTES ? { kind: 'whole', length, digest: m[2]! } : null;
}

/** The key of one hop's frames: from its MAC and the secret, so a captured MAC alone does not give it. */
export const frameKey = (secret: string, hopMac: Buffer): Buffer => createHmac('sha256', secret).update('vessel-hop-body-v1\n').update(hopMac).digest();

function frameMac(key: Buffer, seq: number, flags: number, data: Buffer): Buffer {
  const head = Buffer.alloc(13);
  head.writeBigUInt64BE(BigInt(seq), 0);
  head.writeUInt8(flags, 8);
  head.writeUInt32BE(data.length, 9);
  return createHmac('sha256', key).update(head).update(data).digest();
}

const refused = (why: string): VesselError => new VesselError('unauthenticated', `this is a VM host: the hop's body was refused (${why})`);

/** The sender's side: the body as frames, the last one (empty) sent only when the body has ended. */
export class BodyFramer extends Transform {
  #seq = 0;

  constructor(private readonly key: Buffer) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    for (let at = 0; at < chunk.length; at += MAX_FRAME_BYTES) this.#frame(chunk.subarray(at, at + MAX_FRAME_BYTES), 0);
    done();
  }

  override _flush(done: TransformCallback): void {
    this.#frame(Buffer.alloc(0), LAST);
    done();
  }

  #frame(data: Buffer, flags: number): void {
    const head = Buffer.alloc(FRAME_HEAD_BYTES);
    head.writeUInt32BE(data.length, 0);
    head.writeUInt8(flags, 4);
    this.push(Buffer.concat([head, data, frameMac(this.key, this.#seq++, flags, data)]));
  }
}

/**
 * The host's side of `frames`: hands on each frame's data once its HMAC matched. Bytes wait in a
 * list until a whole frame is there, then are joined once: a body sent a byte at a time costs no
 * more than one sent whole.
 */
export class BodyUnframer extends Transform {
  #seq = 0;
  #ended = false;
  readonly #held: Buffer[] = [];
  #heldBytes = 0;
  /** The whole frame's size once its head is in. */
  #need: number | null = null;

  constructor(private readonly key: Buffer) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    if (this.#ended) return done(refused('bytes after its last frame'));
    this.#held.push(chunk);
    this.#heldBytes += chunk.length;
    for (;;) {
      if (this.#need === null) {
        if (this.#heldBytes < FRAME_HEAD_BYTES) return done();
        const head = this.#take(FRAME_HEAD_BYTES, false);
        const length = head.readUInt32BE(0);
        if (length > MAX_FRAME_BYTES || head[4]! > LAST) return done(refused('a malformed frame'));
        this.#need = FRAME_HEAD_BYTES + length + FRAME_MAC_BYTES;
      }
      if (this.#heldBytes < this.#need) return done();
      const frame = this.#take(this.#need, true);
      this.#need = null;
      const flags = frame[4]!;
      const data = frame.subarray(FRAME_HEAD_BYTES, frame.length - FRAME_MAC_BYTES);
      const expected = frameMac(this.key, this.#seq++, flags, data);
      if (!timingSafeEqual(expected, frame.subarray(frame.length - FRAME_MAC_BYTES))) return done(refused('a frame does not match the hop'));
      if (data.length > 0) this.push(data);
      if (flags === LAST) {
        this.#ended = true;
        return done(this.#heldBytes > 0 ? refused('bytes after its last frame') : undefined);
      }
    }
  }

  override _flush(done: TransformCallback): void {
    done(this.#ended ? undefined : refused('it ended before its last frame'));
  }

  /** The first `n` held bytes, removed when `consume`, else only looked at (a frame's head). */
  #take(n: number, consume: boolean): Buffer {
    if (this.#held[0]!.length < n) this.#held.splice(0, this.#held.length, Buffer.concat(this.#held, this.#heldBytes));
    const first = this.#held[0]!;
    const out = first.subarray(0, n);
    if (!consume) return out;
    if (first.length === n) this.#held.shift();
    else this.#held[0] = first.subarray(n);
    this.#heldBytes -= n;
    return out;
  }
}

/** The host's side of `whole`: the body is held, and handed on only when its length and digest match. */
export class WholeBodyCheck extends Transform {
  readonly #held: Buffer[] = [];
  #size = 0;

  constructor(private readonly name: { length: number; digest: string }) {
    super();
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, done: TransformCallback): void {
    this.#size += chunk.length;
    if (this.#size > this.name.length) return done(refused('longer than signed'));
    this.#held.push(chunk);
    done();
  }

  override _flush(done: TransformCallback): void {
    const body = Buffer.concat(this.#held, this.#size);
    if (body.length !== this.name.length || createHash('sha256').update(body).digest('base64url') !== this.name.digest) return done(refused('it does not match its digest'));
    if (body.length > 0) this.push(body);
    done();
  }
}

/**
 * `payload` read through `check`. A request cut short fails the check's output too: its reader
 * must see an error, never an end, and never wait on a body that stopped.
 */
export function checkedBody(payload: Readable, check: Transform): Readable {
  payload.once('error', (err) => check.destroy(err));
  payload.once('close', () => {
    if (!payload.readableEnded) check.destroy(refused('the request was cut short'));
  });
  return payload.pipe(check);
}
