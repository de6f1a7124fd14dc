/**
 * Frames of the vessel-agent protocol (docs/agent-protocol.md). A frame is a 12-byte header
 * (magic 0x56, type, flags, a zero byte, stream id and payload length, little-endian), the
 * payload (at most 64 KiB) and one end byte, 0x0A.
 *
 * Everything the agent sends is hostile: the decoder works in time linear in the bytes it is
 * given however they are cut (a payload inside one chunk is a view, one spread over several is
 * copied once), buffers at most one frame, and throws AgentProtocolError at the first byte that
 * cannot be right (wrong magic, a type the agent never sends, a length over the cap, a wrong end
 * byte). The caller ends that VM's channel; nothing else is affected.
 */

import { AGENT_FRAME_TYPES_BY_NAME, HOST_FRAME_TYPES, SYNC_MAGIC_TEXT, WIRE } from './protocol.js';

// The values come from protocol.ts, the one source the C agent's protocol.h is generated from.
export const FRAME_MAGIC = WIRE.FRAME_MAGIC.value;
export const FRAME_END = WIRE.FRAME_END.value;
export const HEADER_BYTES = WIRE.HEADER_BYTES.value;
/** Bounds what either side buffers for one frame. */
export const MAX_PAYLOAD = WIRE.MAX_PAYLOAD.value;
export const PROTOCOL_VERSION = WIRE.PROTOCOL_VERSION.value;
export const NONCE_BYTES = WIRE.NONCE_BYTES.value;
/** What the agent hunts for after a malformed frame or a disconnection. */
export const SYNC_MAGIC = Buffer.from(SYNC_MAGIC_TEXT, 'latin1');
/**
 * 0xFF bytes sent before SYNC_MAGIC: enough to complete whatever frame the agent is in the middle
 * of (whose end byte then lands on 0xFF, so it is discarded, never acted on) and to leave a
 * whole header of 0xFF after it, which no valid header is. The agent then hunts for SYNC_MAGIC.
 */
export const RESYNC_FILL_BYTES = HEADER_BYTES + MAX_PAYLOAD + 1 + HEADER_BYTES;
export const HELLO_BYTES = WIRE.HELLO_BYTES.value;
export const HELLO_ACK_BYTES = WIRE.HELLO_ACK_BYTES.value;
/** SPAWN's fixed part (docs/agent-protocol.md): flags, ring, window, rows and cols, argc and envc. */
export const SPAWN_FIXED_BYTES = WIRE.SPAWN_FIXED_BYTES.value;

/** Host-to-agent frame types. WINDOW and DATA go both ways. */
export const T = HOST_FRAME_TYPES;

/** Agent-to-host frame types: nothing else is accepted from a guest. */
export const R = AGENT_FRAME_TYPES_BY_NAME;

export const AGENT_FRAME_TYPES: ReadonlySet<number> = new Set(Object.values(R));
export const FLAG_EOF = WIRE.FLAG_EOF.value;

export interface Frame {
  type: number;
  flags: number;
  stream: number;
  payload: Buffer;
}

/** The peer broke the protocol: the channel it came on must end. */
export class AgentProtocolError extends Error {
  override readonly name = 'AgentProtocolError';
}

const EMPTY = Buffer.alloc(0);

export function encodeFrame(type: number, stream: number, payload: Buffer = EMPTY, flags = 0): Buffer {
  if (payload.length > MAX_PAYLOAD) throw new RangeError(`a frame payload is at most ${MAX_PAYLOAD} bytes, not ${payload.length}`);
  const frame = Buffer.allocUnsafe(HEADER_BYTES + payload.length + 1);
  frame[0] = FRAME_MAGIC;
  frame[1] = type;
  frame[2] = flags;
  frame[3] = 0;
  frame.writeUInt32LE(stream >>> 0, 4);
  frame.writeUInt32LE(payload.length, 8);
  payload.copy(frame, HEADER_BYTES);
  frame[HEADER_BYTES + payload.length] = FRAME_END;
  return frame;
}

/**
 * A payload to keep after its frame is handled. A payload is a view of the socket read (or of
 * the one copy that joined reads), which nothing reuses: a large one is kept as it is, sparing a
 * copy of every 64 KiB of file data; a small one is copied, so that a guest sending tiny frames
 * cannot make each pin a whole read.
 */
export function retainable(payload: Buffer): Buffer {
  return payload.length * 2 >= payload.buffer.byteLength ? payload : Buffer.from(payload);
}

/** What the host sends on every (re)connection: filler, SYNC_MAGIC, then HELLO with its nonce. */
export function resyncPreamble(nonce: Buffer): Buffer {
  const hello = Buffer.alloc(HELLO_BYTES);
  hello.writeUInt16LE(PROTOCOL_VERSION, 0);
  nonce.copy(hello, 4);
  return Buffer.concat([Buffer.alloc(RESYNC_FILL_BYTES, 0xff), SYNC_MAGIC, encodeFrame(T.HELLO, 0, hello)]);
}

/**
 * Incremental decoder. `push` hands every whole frame to `onFrame`, in order, and throws
 * AgentProtocolError on a malformed one; after that it throws again on every push.
 */
export class FrameDecoder {
  readonly #chunks: Buffer[] = [];
  #first = 0; // index in #chunks of the first unconsumed chunk
  #offset = 0; // consumed bytes of that chunk
  #buffered = 0;
  #frameBytes = -1; // the current frame's whole size, once its header is checked
  #header = { type: 0, flags: 0, stream: 0 };
  #failure: AgentProtocolError | undefined;

  constructor(
    private readonly onFrame: (frame: Frame) => void,
    private readonly accept: ReadonlySet<number> = AGENT_FRAME_TYPES,
  ) {}

  push(chunk: Buffer): void {
    if (this.#failure !== undefined) throw this.#failure;
    if (chunk.length === 0) return;
    this.#chunks.push(chunk);
    this.#buffered += chunk.length;
    for (;;) {
      if (this.#frameBytes < 0) {
        if (this.#buffered < HEADER_BYTES) return;
        this.#checkHeader(this.#read(HEADER_BYTES, false));
      }
      if (this.#buffered < this.#frameBytes) return;
      const whole = this.#read(this.#frameBytes, true);
      if (whole[whole.length - 1] !== FRAME_END) this.#fail(`frame on stream ${this.#header.stream} has end byte 0x${whole[whole.length - 1]!.toString(16)}, not 0x0a`);
      this.#frameBytes = -1;
      this.onFrame({ ...this.#header, payload: whole.subarray(HEADER_BYTES, whole.length - 1) });
    }
  }

  #checkHeader(h: Buffer): void {
    if (h[0] !== FRAME_MAGIC) this.#fail(`bad frame magic 0x${h[0]!.toString(16)}`);
    if (h[3] !== 0) this.#fail('reserved header byte is not 0');
    const type = h[1]!;
    if (!this.accept.has(type)) this.#fail(`unknown frame type 0x${type.toString(16)}`);
    const length = h.readUInt32LE(8);
    if (length > MAX_PAYLOAD) this.#fail(`frame payload of ${length} bytes exceeds ${MAX_PAYLOAD}`);
    this.#header = { type, flags: h[2]!, stream: h.readUInt32LE(4) };
    this.#frameBytes = HEADER_BYTES + length + 1;
  }

  /** The next n buffered bytes: a view when they lie in one chunk, else one copy. */
  #read(n: number, consume: boolean): Buffer {
    const head = this.#chunks[this.#first]!;
    let out: Buffer;
    if (head.length - this.#offset >= n) {
      out = head.subarray(this.#offset, this.#offset + n);
    } else {
      out = Buffer.allocUnsafe(n);
      let filled = 0;
      for (let i = this.#first, off = this.#offset; filled < n; i++, off = 0) {
        filled += this.#chunks[i]!.copy(out, filled, off, Math.min(this.#chunks[i]!.length, off + n - filled));
      }
    }
    if (consume) this.#consume(n);
    return out;
  }

  #consume(n: number): void {
    this.#buffered -= n;
    while (n > 0) {
      const left = this.#chunks[this.#first]!.length - this.#offset;
      if (n < left) {
        this.#offset += n;
        return;
      }
      n -= left;
      this.#first++;
      this.#offset = 0;
    }
    if (this.#first > 64 || this.#first === this.#chunks.length) {
      this.#chunks.splice(0, this.#first);
      this.#first = 0;
    }
  }

  #fail(message: string): never {
    this.#failure = new AgentProtocolError(message);
    this.#chunks.length = 0;
    this.#buffered = 0;
    throw this.#failure;
  }
}

/**
 * Finds the agent's answer to our HELLO in a stream that may begin with anything: stale frames,
 * half a frame, bytes QEMU buffered for a previous client. The answer is the HELLO_ACK frame
 * carrying our random nonce; everything before it is discarded, at most `maxDiscard` bytes
 * (beyond that the channel is given up). Returns the bytes from the ACK's header on, once found.
 */
export class ResyncScanner {
  #tail = EMPTY;
  #discarded = 0;

  constructor(
    private readonly nonce: Buffer,
    private readonly maxDiscard: number,
  ) {}

  push(chunk: Buffer): Buffer | null {
    const bytes = this.#tail.length === 0 ? chunk : Buffer.concat([this.#tail, chunk]);
    for (let from = HEADER_BYTES; ; ) {
      const at = bytes.indexOf(this.nonce, from);
      if (at < 0) break;
      const h = at - HEADER_BYTES;
      const length = bytes.readUInt32LE(h + 8);
      if (bytes[h] === FRAME_MAGIC && bytes[h + 1] === R.HELLO_ACK && bytes[h + 3] === 0 && bytes.readUInt32LE(h + 4) === 0 && length >= HELLO_ACK_BYTES && length <= MAX_PAYLOAD) {
        return bytes.subarray(h);
      }
      from = at + 1;
    }
    const keep = Math.min(bytes.length, HEADER_BYTES + this.nonce.length - 1);
    this.#discarded += bytes.length - keep;
    if (this.#discarded > this.maxDiscard) throw new AgentProtocolError(`no answer to HELLO in the first ${this.maxDiscard} bytes`);
    this.#tail = Buffer.from(bytes.subarray(bytes.length - keep));
    return null;
  }
}
