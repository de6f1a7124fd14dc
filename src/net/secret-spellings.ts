/**
 * The spellings in which an injected value can come back from an upstream: as sent, and as the
 * encodings an echo produces around it: percent-encoding (a URL), form encoding, a JSON string
 * (an echo service's body, with `/` escaped or non-ASCII as `\uXXXX` as some encoders write
 * it), HTML text (an error page quoting the request) and base64 (a header block or body encoded
 * whole). Both header and body redaction use these.
 *
 * Base64 of a larger text that holds the value encodes it differently at each of the three
 * alignments the value can start at: for each, the characters that depend on the value's bytes
 * alone are a spelling (standard and URL-safe alphabets). Those shorter than MIN_BASE64_CHARS are
 * left out: a few characters match too much unrelated text, and say little of the value.
 */

/** The shortest base64 run, taken from inside a larger encoding, that is redacted. */
export const MIN_BASE64_CHARS = 8;

const HTML_ESCAPES: ReadonlyArray<Record<string, string>> = [
  { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' },
  { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&#34;', "'": '&#39;' },
  { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#x27;' },
];

function jsonSpellings(value: string): string[] {
  const json = JSON.stringify(value).slice(1, -1);
  const ascii = json.replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
  return [json, json.replace(/\//g, '\\/'), ascii, ascii.replace(/\//g, '\\/')];
}

/** The base64 characters that encode `bytes` alone, at each alignment, in both alphabets. */
function base64Spellings(bytes: Buffer): string[] {
  const out: string[] = [bytes.toString('base64')];
  for (let lead = 0; lead < 3; lead++) {
    const total = lead + bytes.length;
    const encoded = Buffer.concat([Buffer.alloc(lead), bytes]).toString('base64');
    // A character is the value's alone when all six of its bits are: in the first group, those
    // after the lead bytes' bits; in a last, partial group of `tail` bytes, the first `tail`
    // characters (the next ones carry bits of whatever follows the value).
    const from = lead === 0 ? 0 : lead === 1 ? 2 : 3;
    const tail = total % 3;
    const middle = encoded.slice(from, Math.floor(total / 3) * 4 + tail);
    if (middle.length >= MIN_BASE64_CHARS) out.push(middle);
  }
  return out.flatMap((s) => [s, s.replace(/\+/g, '-').replace(/\//g, '_')]);
}

/** Every spelling of `value`, deduplicated; none empty. */
export function spellings(value: string): string[] {
  if (value === '') return [];
  const form = new URLSearchParams([['', value]]).toString().slice(1);
  const html = HTML_ESCAPES.map((map) => value.replace(/[&<>"']/g, (c) => map[c]!));
  return [...new Set([value, encodeURIComponent(value), encodeURI(value), form, ...jsonSpellings(value), ...html, ...base64Spellings(Buffer.from(value, 'utf8'))])];
}
