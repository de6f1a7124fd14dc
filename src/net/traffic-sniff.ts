/**
 * What a guest's first bytes on a connection are: a TLS ClientHello (with its SNI), an HTTP/1
 * request line, or something else. Pure, so that it can be fuzzed and unit tested.
 * `bad_tls`: a TLS handshake that is malformed, or longer than the gateway reads: refused.
 */
export type Sniffed = { kind: 'incomplete' } | { kind: 'tls'; sni: string | null } | { kind: 'bad_tls' } | { kind: 'http' } | { kind: 'other' };

/** The largest ClientHello accepted (the handshake message's body); real ones are 0.5-2 KB. */
export const MAX_CLIENT_HELLO = 16_384;
/**
 * The most the gateway reads ahead: a ClientHello of MAX_CLIENT_HELLO bytes split across records
 * (each adding a 5-byte header), or a request line. A hello not whole within this is refused.
 */
export const MAX_SNIFF_BYTES = 2 * (MAX_CLIENT_HELLO + 4) + 5;

const HTTP_METHOD_PREFIX = /^[A-Z]{1,16}$/;
const HTTP_REQUEST_START = /^[A-Z]{1,16} [^\s]+ HTTP\/1\.[01]\r?\n/;

export function sniff(buf: Buffer): Sniffed {
  if (buf.length === 0) return { kind: 'incomplete' };
  if (buf[0] === 0x16) return sniffTls(buf);
  const head = buf.subarray(0, 8192).toString('latin1');
  const lineEnd = head.indexOf('\n');
  if (lineEnd === -1) {
    const firstWord = head.split(' ', 1)[0]!;
    const stillPossible = head.includes(' ') ? HTTP_METHOD_PREFIX.test(firstWord) : /^[A-Z]{1,16}$/.test(head);
    return stillPossible && buf.length < 8192 ? { kind: 'incomplete' } : { kind: 'other' };
  }
  return HTTP_REQUEST_START.test(head.slice(0, lineEnd + 1)) ? { kind: 'http' } : { kind: 'other' };
}

/**
 * The ClientHello, reassembled from as many handshake records as carry it (RFC 8446 §5.1: a
 * handshake message may span records, and the server reassembles it; deciding on the first
 * record alone read a name cut at its end). Every length is checked against the bytes it
 * claims; one that runs past them is malformed, never clamped.
 */
function sniffTls(buf: Buffer): Sniffed {
  const fragments: Buffer[] = [];
  let held = 0;
  let need: number | null = null; // the whole handshake message, once its header has arrived
  let p = 0;
  while (need === null || held < need) {
    if (p + 5 > buf.length) return buf.length >= MAX_SNIFF_BYTES ? { kind: 'bad_tls' } : { kind: 'incomplete' };
    if (buf[p] !== 0x16) return p === 0 ? { kind: 'other' } : { kind: 'bad_tls' };
    if (buf[p + 1] !== 0x03) return p === 0 ? { kind: 'other' } : { kind: 'bad_tls' };
    const length = buf.readUInt16BE(p + 3);
    if (length === 0 || length > 16_384) return p === 0 ? { kind: 'other' } : { kind: 'bad_tls' };
    if (p + 5 + length > buf.length) return buf.length >= MAX_SNIFF_BYTES ? { kind: 'bad_tls' } : { kind: 'incomplete' };
    fragments.push(buf.subarray(p + 5, p + 5 + length));
    held += length;
    p += 5 + length;
    if (need === null && held >= 4) {
      const head = Buffer.concat(fragments, held);
      if (head[0] !== 0x01) return { kind: 'bad_tls' };
      const bodyLength = head.readUIntBE(1, 3);
      if (bodyLength > MAX_CLIENT_HELLO) return { kind: 'bad_tls' };
      need = 4 + bodyLength;
    }
  }
  // Anything after the ClientHello in its last record is not what a client sends first.
  if (held !== need) return { kind: 'bad_tls' };
  try {
    return { kind: 'tls', sni: clientHelloSni(Buffer.concat(fragments, held).subarray(4)) };
  } catch {
    return { kind: 'bad_tls' };
  }
}

/** Reads a ClientHello's fields in order; throws when a length runs past the bytes it is given. */
class Fields {
  #p = 0;
  constructor(private readonly buf: Buffer) {}
  get done(): boolean {
    return this.#p === this.buf.length;
  }
  /** The next `n` bytes. */
  take(n: number): Buffer {
    if (this.#p + n > this.buf.length) throw new RangeError('a length runs past its data');
    const out = this.buf.subarray(this.#p, this.#p + n);
    this.#p += n;
    return out;
  }
  /** Everything left. */
  rest(): Buffer {
    return this.take(this.buf.length - this.#p);
  }
  int(bytes: 1 | 2): number {
    return this.take(bytes).readUIntBE(0, bytes);
  }
  /** A field with a length prefix of `bytes`. */
  vector(bytes: 1 | 2): Fields {
    return new Fields(this.take(this.int(bytes)));
  }
}

/**
 * The server_name of a ClientHello body; null when it has none. Throws when it is malformed: a
 * length past its data, bytes left over in a field, two server_name extensions or two host
 * names (which one would the upstream read?), or an empty name.
 */
function clientHelloSni(body: Buffer): string | null {
  const hello = new Fields(body);
  hello.take(2 + 32); // legacy_version, random
  hello.vector(1); // session id
  hello.vector(2); // cipher suites
  hello.vector(1); // compression methods
  if (hello.done) return null; // no extensions at all
  const extensions = hello.vector(2);
  if (!hello.done) throw new RangeError('bytes after the extensions');
  let sni: string | null = null;
  let seen = false;
  while (!extensions.done) {
    const type = extensions.int(2);
    const data = extensions.vector(2);
    if (type !== 0x0000) continue;
    if (seen) throw new RangeError('two server_name extensions');
    seen = true;
    const list = data.vector(2);
    if (!data.done) throw new RangeError('bytes after the server name list');
    while (!list.done) {
      const nameType = list.int(1);
      const name = list.vector(2);
      if (nameType !== 0) continue;
      if (sni !== null) throw new RangeError('two host names');
      const bytes = name.rest();
      if (bytes.length === 0) throw new RangeError('an empty host name');
      sni = bytes.toString('latin1');
    }
  }
  return sni;
}
