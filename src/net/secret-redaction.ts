/**
 * Removes injected values from what an upstream answers before the guest sees it. A server that
 * canonicalizes a URL (`Location: /foo/?api_key=…`) or reflects a request header would otherwise
 * hand the guest the very secret it must never hold. Response headers (names and values) and the
 * status line are redacted; a response body is not: an upstream the rule trusts with the secret
 * can still echo it there (docs/network.md).
 */

/** What replaces a redacted value: a valid header token, so it fits names and values alike. */
export const REDACTED = 'vessel-redacted';

/** The spellings a value may come back in: as sent, percent-encoded, form-encoded. */
function spellings(value: string): string[] {
  const form = new URLSearchParams([['', value]]).toString().slice(1);
  return [value, encodeURIComponent(value), encodeURI(value), form];
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

export class Redactor {
  /** One alternation, longest spelling first; case-insensitive so `%2f` and `%2F` both match. */
  readonly #pattern: RegExp | null;

  constructor(values: readonly string[]) {
    const needles = [...new Set(values.filter((v) => v !== '').flatMap(spellings))].sort((a, b) => b.length - a.length);
    this.#pattern = needles.length === 0 ? null : new RegExp(needles.map(escapeRegExp).join('|'), 'gi');
  }

  text(s: string): string {
    return this.#pattern === null ? s : s.replace(this.#pattern, REDACTED);
  }

  /** A flat raw header list with every name and value redacted. */
  headers(raw: readonly string[]): string[] {
    return this.#pattern === null ? [...raw] : raw.map((s) => this.text(s));
  }
}
