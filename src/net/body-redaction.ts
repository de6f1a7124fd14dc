/**
 * Redaction of response bodies, streamed: every spelling of an injected value (secret-spellings.ts)
 * is overwritten with `*`, byte for byte, so a Content-Length stays true and nothing is buffered
 * but the few bytes that could still begin a match.
 *
 * One Aho-Corasick automaton over bytes, ASCII letters folded, finds every spelling in one pass
 * (linear in the body, however many spellings and however they overlap). A chunk's bytes are
 * passed on as soon as no spelling can still include them: the stream holds back only the longest
 * suffix of what it has seen that is a prefix of some spelling, at most (longest spelling − 1)
 * bytes, so a secret split across chunks at any offset is caught, and no undecided byte leaves.
 */
import { Transform, type TransformCallback } from 'node:stream';
import { spellings } from './secret-spellings.js';

/** What a matched byte becomes: a token character of no encoding's alphabet but HTML/JSON text's. */
const MASK = 0x2a; // '*'

/** ASCII letters folded to lowercase; every other byte is itself. */
const FOLD = new Uint8Array(256).map((_, b) => (b >= 0x41 && b <= 0x5a ? b + 32 : b));

/**
 * A value that holds another of at least this many characters needs no spellings of its own: each
 * of its spellings holds the other's (every encoding here but base64 works character by
 * character, and base64 of the other is matched at every alignment once it is this long), and
 * masking the other leaves only the rule's own text (`Bearer `). A header `Bearer <secret>` and
 * a parameter `<secret>` so cost no more than the secret.
 */
const CONTAINED_MIN_CHARS = 12;

/**
 * The most spelling bytes one automaton may hold (each costs some 21 bytes of automaton): what a
 * 64 KiB ASCII secret needs, with room. Beyond it the request is refused rather than forwarded
 * with a body that could not be redacted.
 */
export const MAX_PATTERN_BYTES = 4 * 1024 * 1024;

/** The spellings of `values` as bytes: UTF-8, and Latin-1 where that differs (header text is Latin-1). */
function patterns(values: readonly string[]): Buffer[] {
  const distinct = [...new Set(values.filter((v) => v !== ''))];
  const needed = distinct.filter((v) => !distinct.some((u) => u !== v && u.length >= CONTAINED_MIN_CHARS && v.includes(u)));
  const out = new Map<string, Buffer>();
  for (const s of needed.flatMap(spellings)) {
    for (const bytes of [Buffer.from(s, 'utf8'), ...(/^[\x00-\xff]*$/.test(s) ? [Buffer.from(s, 'latin1')] : [])]) {
      const folded = Buffer.from(bytes.map((b) => FOLD[b]!));
      out.set(folded.toString('latin1'), folded);
    }
  }
  return [...out.values()].filter((p) => p.length > 0);
}

/**
 * The automaton, in typed arrays sized by the spellings' total length (no object per node: a
 * 64 KiB secret makes some 10⁶ nodes). Node 0 is the root, whose transitions are a dense table
 * (most bytes of a body leave it at once); every other node's children are a linked list, short
 * since spellings part ways after a few bytes.
 */
export class SecretMatcher {
  /** The longest spelling, in bytes; 0 when there is none. */
  readonly maxLength: number;
  readonly #root = new Int32Array(256);
  readonly #firstChild: Int32Array;
  readonly #nextSibling: Int32Array;
  readonly #label: Uint8Array;
  readonly #fail: Int32Array;
  /** The longest spelling that ends at the node (its own, or one reached by failure links); 0 if none. */
  readonly #out: Int32Array;
  readonly #depth: Int32Array;
  /**
   * Which two-byte pairs begin some spelling, when every spelling has two bytes or more: at the
   * root, a byte whose pair with the next begins none cannot start a match, and the state after
   * it is the root's again (a one-byte prefix that cannot grow falls back there), so it is passed
   * over in a tight loop. Most bytes of a body are.
   */
  readonly #pairs: Uint8Array | null;

  constructor(values: readonly string[]) {
    const all = patterns(values);
    this.maxLength = all.reduce((m, p) => Math.max(m, p.length), 0);
    const capacity = all.reduce((n, p) => n + p.length, 1);
    if (capacity > MAX_PATTERN_BYTES) throw new Error(`the injected values' spellings take ${capacity} bytes, over the ${MAX_PATTERN_BYTES} a response can be redacted of`);
    const firstChild = (this.#firstChild = new Int32Array(capacity));
    const nextSibling = (this.#nextSibling = new Int32Array(capacity));
    const label = (this.#label = new Uint8Array(capacity));
    const fail = (this.#fail = new Int32Array(capacity));
    const out = (this.#out = new Int32Array(capacity));
    const depth = (this.#depth = new Int32Array(capacity));
    const root = this.#root;
    let count = 1;
    for (const p of all) {
      let node = 0;
      for (const b of p) {
        let next = this.#child(node, b);
        if (next === 0) {
          next = count++;
          label[next] = b;
          depth[next] = depth[node]! + 1;
          nextSibling[next] = firstChild[node]!;
          firstChild[node] = next;
          if (node === 0) root[b] = next;
        }
        node = next;
      }
      out[node] = p.length;
    }
    this.#pairs = all.some((p) => p.length < 2) ? null : new Uint8Array(65_536);
    for (const p of all) if (this.#pairs !== null) this.#pairs[(p[0]! << 8) | p[1]!] = 1;
    // Failure links breadth first: a node's link is shallower, so it is final by then.
    const queue = new Int32Array(count);
    let tail = 0;
    for (let c = firstChild[0]!; c !== 0; c = nextSibling[c]!) queue[tail++] = c;
    for (let head = 0; head < tail; head++) {
      const node = queue[head]!;
      for (let c = firstChild[node]!; c !== 0; c = nextSibling[c]!) {
        fail[c] = this.#step(fail[node]!, label[c]!);
        if (out[fail[c]!]! > out[c]!) out[c] = out[fail[c]!]!;
        queue[tail++] = c;
      }
    }
  }

  /** The child of `node` (not the root) by `b`, or 0. */
  #child(node: number, b: number): number {
    if (node === 0) return this.#root[b]!;
    let c = this.#firstChild[node]!;
    while (c !== 0 && this.#label[c] !== b) c = this.#nextSibling[c]!;
    return c;
  }

  /** The state after `state` reads folded byte `b`. */
  #step(state: number, b: number): number {
    for (;;) {
      if (state === 0) return this.#root[b]!;
      const c = this.#child(state, b);
      if (c !== 0) return c;
      state = this.#fail[state]!;
    }
  }

  /**
   * Reads `buf` from `from` on, in state `state`, masking every spelling that ends in it (its
   * start may lie before `from`, in bytes the caller held back). Returns the state after. The
   * step is written out here: this loop is the cost of redaction per byte.
   */
  scan(buf: Buffer, from: number, state: number): number {
    const pairs = this.#pairs, root = this.#root, firstChild = this.#firstChild, nextSibling = this.#nextSibling, label = this.#label, fail = this.#fail, out = this.#out;
    // A plain Uint8Array view: element reads on it are monomorphic, on a Buffer they are not.
    const bytes = new Uint8Array(buf.buffer, buf.byteOffset, buf.length);
    const n = bytes.length;
    for (let i = from; i < n; i++) {
      // At the root, most bytes begin no spelling: pass over them without the general step.
      if (state === 0) {
        if (pairs !== null) while (i + 1 < n && pairs[(FOLD[bytes[i]!]! << 8) | FOLD[bytes[i + 1]!]!] === 0) i++;
        else while (i < n && root[FOLD[bytes[i]!]!] === 0) i++;
        if (i === n) break;
      }
      const b = FOLD[bytes[i]!]!;
      for (;;) {
        if (state === 0) {
          state = root[b]!;
          break;
        }
        let c = firstChild[state]!;
        while (c !== 0 && label[c] !== b) c = nextSibling[c]!;
        if (c !== 0) {
          state = c;
          break;
        }
        state = fail[state]!;
      }
      const length = out[state]!;
      if (length > 0) buf.fill(MASK, i - length + 1, i + 1);
    }
    return state;
  }

  /** How many bytes ending in `state` could still begin a spelling. */
  depth(state: number): number {
    return this.#depth[state]!;
  }
}

/**
 * Automatons shared by every connection whose redaction needs the same values (a runtime's
 * keep-alive connections to one host usually do), counted, and dropped with the last user: one
 * per distinct set of values in use, never kept past it.
 */
const inUse = new Map<string, { matcher: SecretMatcher; users: number }>();

/** The automaton for `values`, shared; `release` once it is no longer used. Throws past MAX_PATTERN_BYTES. */
export function acquireMatcher(values: readonly string[]): { matcher: SecretMatcher; release(): void } {
  const key = values.join('\u0000');
  let entry = inUse.get(key);
  if (entry === undefined) inUse.set(key, (entry = { matcher: new SecretMatcher(values), users: 0 }));
  entry.users++;
  const held = entry;
  let released = false;
  return {
    matcher: entry.matcher,
    release: () => {
      if (released) return;
      released = true;
      if (--held.users === 0 && inUse.get(key) === held) inUse.delete(key);
    },
  };
}

/** How many automatons are held now (tests). */
export const matchersInUse = (): number => inUse.size;

/** A stream that passes a body on with every spelling of the matcher's values masked. */
export class RedactingStream extends Transform {
  #state = 0;
  /** Bytes seen but not passed on: they could still be the start of a spelling. */
  #held: Buffer = Buffer.alloc(0);

  constructor(private readonly matcher: SecretMatcher) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, done: TransformCallback): void {
    // A copy: the chunk may be shared, and masking writes into it.
    const buf = Buffer.concat([this.#held, chunk]);
    this.#state = this.matcher.scan(buf, this.#held.length, this.#state);
    const keep = Math.min(this.matcher.depth(this.#state), Math.max(0, this.matcher.maxLength - 1));
    this.#held = buf.subarray(buf.length - keep);
    if (buf.length > keep) this.push(buf.subarray(0, buf.length - keep));
    done();
  }

  override _flush(done: TransformCallback): void {
    // What is held is a prefix of a spelling that never finished: nothing to mask.
    if (this.#held.length > 0) this.push(this.#held);
    done();
  }
}
