/**
 * Cookies a runtime sets through ingress are host-only. Every runtime is served under the one
 * ingress domain (`<port>-<id>.<domain>`), so a `Set-Cookie` with `Domain=<domain>` would reach
 * every other tenant's runtime (and anything else under that domain): session fixation across
 * tenants. Ingress therefore removes every `Domain` attribute from each `Set-Cookie` a guest
 * sends. A cookie whose Domain was the runtime's exact host means the same without it (host-only
 * is that host alone), one whose Domain covered more is narrowed to that host, and one whose
 * Domain a browser would have refused becomes a cookie the runtime could have set anyway.
 *
 * Parsing follows RFC 6265 §5.2, as browsers do: attributes are split on `;` alone (quotes do not
 * protect a `;`), names are compared without regard to case or surrounding whitespace. To be
 * safe against any parser's notion of whitespace, an attribute is a Domain when its name with
 * every character but ASCII letters removed is `domain`; dropping an odd attribute a browser
 * would have ignored anyway costs nothing. One pass over the value, linear in its length.
 *
 * This covers cookies set by response headers. A page's script (`document.cookie`) can still
 * set a cookie for the parent domain: only a dedicated domain on the Public Suffix List stops
 * that (docs/network.md, "Cookies").
 */

/** `value` (one Set-Cookie header's value) with every Domain attribute removed. */
export function hostOnlyCookie(value: string): string {
  const parts = value.split(';');
  const kept = [parts[0]!];
  for (let i = 1; i < parts.length; i++) {
    const part = parts[i]!;
    const eq = part.indexOf('=');
    const name = (eq === -1 ? part : part.slice(0, eq)).replace(/[^A-Za-z]/g, '').toLowerCase();
    if (name !== 'domain') kept.push(part);
  }
  return kept.length === parts.length ? value : kept.join(';');
}

/** A flat raw header list (name, value, …) with every Set-Cookie made host-only. */
export function hostOnlyCookies(raw: readonly string[]): string[] {
  const out = [...raw];
  for (let i = 0; i + 1 < out.length; i += 2) if (isSetCookie(out[i]!)) out[i + 1] = hostOnlyCookie(out[i + 1]!);
  return out;
}

/** Some parsers trim whitespace around a header name: `Set-Cookie :` is still a Set-Cookie to them. */
const isSetCookie = (name: string): boolean => name.replace(/^[ \t]+|[ \t]+$/g, '').toLowerCase() === 'set-cookie';

/** Any control byte but HTAB, in a header line: a bare CR or LF, which some clients end a line at. */
const CONTROL = /[\x00-\x08\x0a-\x1f\x7f]/;

/**
 * A raw response head (status line and header lines, each ending CRLF, then CRLF) as ingress
 * relays it to an upgrade request, with every Set-Cookie made host-only; null when the head is
 * not one whose lines every client reads alike: a bare CR or LF (browsers end a line at a bare
 * LF, so a Set-Cookie could hide behind one), another control byte, or a folded line. The
 * caller refuses such a head. `head` ends with its blank line and holds nothing after it.
 */
export function hostOnlyResponseHead(head: Buffer): Buffer | null {
  const text = head.toString('latin1');
  if (!text.endsWith('\r\n\r\n')) return null;
  const lines = text.slice(0, -4).split('\r\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i]!;
    if (CONTROL.test(line)) return null;
    if (i === 0) continue;
    if (line.startsWith(' ') || line.startsWith('\t')) return null;
    const colon = line.indexOf(':');
    if (colon === -1) return null;
    if (isSetCookie(line.slice(0, colon))) lines[i] = `${line.slice(0, colon)}:${hostOnlyCookie(line.slice(colon + 1))}`;
  }
  return Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
}
