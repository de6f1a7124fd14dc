/**
 * The streaming body redactor alone: every spelling of a value is masked byte for byte wherever the
 * stream is cut, what it holds back stays under the longest spelling, and its result equals a
 * plain search of the whole body for every spelling (all occurrences, overlapping ones included).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { acquireMatcher, matchersInUse, RedactingStream, SecretMatcher } from '../../src/net/body-redaction.js';
import { MIN_BASE64_CHARS, spellings } from '../../src/net/secret-spellings.js';

/** Runs `chunks` through a redacting stream; resolves with the output and the most it ever held back. */
async function redact(values: string[], chunks: Buffer[]): Promise<{ out: Buffer; maxHeld: number; maxLength: number }> {
  const matcher = new SecretMatcher(values);
  const stream = new RedactingStream(matcher);
  const got: Buffer[] = [];
  let fed = 0;
  let passed = 0;
  let maxHeld = 0;
  stream.on('data', (d: Buffer) => {
    got.push(d);
    passed += d.length;
  });
  for (const c of chunks) {
    fed += c.length;
    await new Promise<void>((r) => stream.write(c, () => r()));
    maxHeld = Math.max(maxHeld, fed - passed);
  }
  await new Promise<void>((r) => stream.end(() => r()));
  return { out: Buffer.concat(got), maxHeld, maxLength: matcher.maxLength };
}

/** The reference: every occurrence of every spelling in the whole text, ASCII case folded, masked. */
function reference(values: string[], text: Buffer): Buffer {
  const out = Buffer.from(text);
  const lower = Buffer.from(text.toString('latin1').toLowerCase(), 'latin1');
  for (const s of values.flatMap(spellings)) {
    for (const form of [Buffer.from(s, 'utf8'), Buffer.from(s, 'latin1')]) {
      const needle = Buffer.from(form.toString('latin1').toLowerCase(), 'latin1');
      for (let at = lower.indexOf(needle); at !== -1; at = lower.indexOf(needle, at + 1)) out.fill(0x2a, at, at + needle.length);
    }
  }
  return out;
}

const SECRET = 'sk/t+st&key=1 "q"%é';
const VALUES = [SECRET, `Bearer ${SECRET}`];

test('a secret split across two chunks at every offset, in each spelling an echo makes, is masked', async () => {
  const block = `GET / HTTP/1.1\r\nAuthorization: Bearer ${SECRET}\r\nX-Other: 1\r\n\r\n`;
  const echoes: Record<string, string> = {
    plain: block,
    percent: encodeURIComponent(block),
    json: JSON.stringify({ headers: block }),
    base64: Buffer.from(block).toString('base64'),
    base64url: Buffer.from(`xy${block}`).toString('base64url'),
    html: block.replace(/&/g, '&amp;').replace(/"/g, '&quot;'),
  };
  for (const [name, echo] of Object.entries(echoes)) {
    const body = Buffer.from(`<<${echo}>>`);
    for (let cut = 0; cut <= body.length; cut++) {
      const { out, maxHeld, maxLength } = await redact(VALUES, [body.subarray(0, cut), body.subarray(cut)]);
      assert.equal(out.length, body.length, `${name} at ${cut}: same length`);
      assert.ok(maxHeld <= maxLength - 1, `${name}: held ${maxHeld} of at most ${maxLength - 1}`);
      const text = out.toString('latin1');
      assert.ok(!text.includes('sk/t') && !text.includes('sk%2Ft'), `${name} at ${cut}: ${text}`);
      if (name.startsWith('base64')) {
        // Masked characters read as 'A': the decoded text holds no part of the secret worth the name.
        const decoded = Buffer.from(text.replace(/\*/g, 'A'), name === 'base64' ? 'base64' : 'base64url').toString('latin1');
        assert.ok(!decoded.includes('t+st&key'), `${name} at ${cut}: ${decoded}`);
      }
      // `Bearer <secret>` holds the secret: its own spellings are not needed, and not searched.
      assert.deepEqual(out, reference([SECRET], body), `${name} at ${cut}: as a whole-body search`);
    }
  }
});

test('a body in one-byte chunks, overlapping and repeated secrets, mixed case: as a whole-body search', async () => {
  const values = ['abab', 'bab', 'xYz'];
  const body = Buffer.from('ababab-BABAB-xyzXYZ-aBaBaB-abaXyZab-ab');
  const { out } = await redact(values, [...body].map((b) => Buffer.from([b])));
  assert.deepEqual(out.toString('latin1'), reference(values, body).toString('latin1'));
  assert.equal(out.toString('latin1'), '******-*****-******-******-aba***ab-ab');
  // A one-character secret: every byte may begin a match.
  assert.equal((await redact(['Q'], [Buffer.from('aq'), Buffer.from('bQq')])).out.toString(), 'a*b**');
});

test('base64 of a value inside a larger encoding is caught at all three alignments', () => {
  const secret = 'correct horse battery staple';
  const forms = spellings(secret);
  for (let lead = 0; lead < 3; lead++) {
    const encoded = Buffer.from(`${'p'.repeat(lead)}${secret}q`).toString('base64');
    assert.ok(forms.some((f) => f.length >= MIN_BASE64_CHARS && encoded.includes(f)), `alignment ${lead}`);
  }
  assert.deepEqual(spellings(''), []);
});

test('a long, repetitive secret costs one pass: a near miss of 64 KiB is left alone', async () => {
  const long = 'a'.repeat(16_384);
  const body = Buffer.from(`${'a'.repeat(16_383)}b`.repeat(8));
  const { out } = await redact([long], [body]);
  assert.deepEqual(out, body);
  const hit = Buffer.from(`x${'A'.repeat(16_384)}y`);
  assert.equal((await redact([long], [hit.subarray(0, 7000), hit.subarray(7000)])).out.toString(), `x${'*'.repeat(16_384)}y`);
});

test('connections with the same values share one automaton, dropped with its last user; a 64 KiB secret fits', async () => {
  const before = matchersInUse();
  const a = acquireMatcher(VALUES);
  const b = acquireMatcher(VALUES);
  assert.equal(a.matcher, b.matcher);
  assert.equal(matchersInUse(), before + 1);
  a.release();
  a.release();
  assert.equal(matchersInUse(), before + 1, 'a second release of one user changes nothing');
  b.release();
  assert.equal(matchersInUse(), before);
  // The largest secret a tenant can store, printable and hostile to every encoding, as header and parameter.
  const big = randomBytes(49_152).toString('base64').replace(/[A-F]/g, '"').replace(/[G-K]/g, '%').replace(/[L-P]/g, '<');
  const huge = acquireMatcher([big, `Bearer ${big}`, big]);
  const body = Buffer.from(`{"echo": ${JSON.stringify(`Bearer ${big}`)}}`);
  const { out } = await redact([big, `Bearer ${big}`], [body.subarray(0, 30_000), body.subarray(30_000)]);
  assert.ok(!out.toString('latin1').includes(JSON.stringify(big).slice(1, 40)));
  huge.release();
});
