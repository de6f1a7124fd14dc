/**
 * Removes injected values from the head of what an upstream answers before the guest sees it. A
 * server that canonicalizes a URL (`Location: /foo/?api_key=…`) or reflects a request header
 * would otherwise hand the guest the very secret it must never hold. Response headers (names and
 * values) and the status line are redacted here, in every spelling of secret-spellings.ts; the
 * body is redacted as it streams, by body-redaction.ts.
 */
import { spellings } from './secret-spellings.js';

/** What replaces a redacted value: a valid header token, so it fits names and values alike. */
export const REDACTED = 'vessel-redacted';

export class Redactor {
  /** Every spelling, lowercased, longest first: a longer spelling is claimed before a part of it. */
  readonly #needles: string[];

  constructor(values: readonly string[]) {
    this.#needles = [...new Set(values.filter((v) => v !== '').flatMap(spellings).map((n) => n.toLowerCase()))].sort((a, b) => b.length - a.length);
  }

  /**
   * `s` with every spelling replaced, matched without regard to case (`%2f` and `%2F` alike).
   * Each spelling is found with indexOf, whose search does not backtrack: one alternation of
   * long, repetitive secrets (a tenant chooses them, up to 64 KiB) made a regular expression's
   * work the product of the header's length and the secret's, on the thread every tenant shares.
   */
  text(s: string): string {
    if (this.#needles.length === 0) return s;
    const lower = s.toLowerCase();
    // Header text is latin1, whose lowercase keeps every position; anything else is redacted whole.
    if (lower.length !== s.length) return this.#needles.some((n) => lower.includes(n)) ? REDACTED : s;
    // One needle's matches do not overlap each other, so marking what is claimed keeps the work
    // to the text's length per spelling, however many matches there are.
    const taken = new Uint8Array(s.length);
    const claimed: Array<[number, number]> = [];
    for (const needle of this.#needles) {
      for (let at = lower.indexOf(needle); at !== -1; at = lower.indexOf(needle, at + needle.length)) {
        const end = at + needle.length;
        if (taken.subarray(at, end).includes(1)) continue;
        taken.fill(1, at, end);
        claimed.push([at, end]);
      }
    }
    if (claimed.length === 0) return s;
    claimed.sort((a, b) => a[0] - b[0]);
    let out = '';
    let last = 0;
    for (const [from, to] of claimed) {
      out += s.slice(last, from) + REDACTED;
      last = to;
    }
    return out + s.slice(last);
  }

  /** A flat raw header list with every name and value redacted. */
  headers(raw: readonly string[]): string[] {
    return raw.map((s) => this.text(s));
  }
}
