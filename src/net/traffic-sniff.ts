/**
 * What a guest's first bytes on a connection are: a TLS ClientHello (with its SNI), an HTTP/1
 * request line, or something else. Pure, so that it can be fuzzed and unit tested.
 */
export type Sniffed = { kind: 'incomplete' } | { kind: 'tls'; sni: string | null } | { kind: 'http' } | { kind: 'other' };

/** The most the gateway reads ahead: one TLS record, or a request line. */
export const MAX_SNIFF_BYTES = 16_384 + 5;

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

function sniffTls(buf: Buffer): Sniffed {
  if (buf.length < 5) return { kind: 'incomplete' };
  if (buf[1] !== 0x03) return { kind: 'other' };
  const recordLength = buf.readUInt16BE(3);
  if (recordLength > 16_384) return { kind: 'other' };
  if (buf.length < 5 + recordLength) return { kind: 'incomplete' };
  try {
    return { kind: 'tls', sni: clientHelloSni(buf.subarray(5, 5 + recordLength)) };
  } catch {
    return { kind: 'tls', sni: null };
  }
}

/** The server_name of a ClientHello handshake message; null when it has none. Throws on garbage. */
function clientHelloSni(hs: Buffer): string | null {
  if (hs[0] !== 0x01) return null;
  let p = 4 + 2 + 32; // handshake header, legacy_version, random
  const skip = (lenBytes: 1 | 2) => {
    const n = lenBytes === 1 ? hs.readUInt8(p) : hs.readUInt16BE(p);
    p += lenBytes + n;
  };
  skip(1); // session id
  skip(2); // cipher suites
  skip(1); // compression methods
  if (p + 2 > hs.length) return null;
  const end = Math.min(hs.length, p + 2 + hs.readUInt16BE(p));
  p += 2;
  while (p + 4 <= end) {
    const type = hs.readUInt16BE(p);
    const len = hs.readUInt16BE(p + 2);
    p += 4;
    if (type === 0x0000) {
      let q = p + 2;
      const listEnd = Math.min(p + len, p + 2 + hs.readUInt16BE(p));
      while (q + 3 <= listEnd) {
        const nameType = hs.readUInt8(q);
        const nameLen = hs.readUInt16BE(q + 1);
        if (nameType === 0) return hs.toString('latin1', q + 3, Math.min(q + 3 + nameLen, listEnd));
        q += 3 + nameLen;
      }
      return null;
    }
    p += len;
  }
  return null;
}
