/**
 * Path patterns of injection rules: `*` matches within one segment, `**` across segments.
 * Request paths are canonicalized before matching so that `/api/../admin`, `%2e%2e` or a path
 * parameter (`/api/..;/admin`, which Tomcat and servers like it resolve to `/admin`) cannot slip
 * a request past (or into) a rule.
 */
import { invalidArgument } from './errors.js';

export const MATCH_ALL_PATHS = '/**';

export function normalizePathPattern(raw: string | null | undefined): string {
  if (raw === null || raw === undefined) return MATCH_ALL_PATHS;
  if (!raw.startsWith('/') || raw.length > 1024 || /[\s?#;]/.test(raw)) {
    throw invalidArgument(`path pattern '${raw}' must start with '/' and contain no spaces, '?', '#' or ';'`);
  }
  if (raw.split('/').some((seg) => seg === '.' || seg === '..')) {
    throw invalidArgument(`path pattern '${raw}' must not contain '.' or '..' segments`);
  }
  return raw;
}

export function compilePathGlob(pattern: string): RegExp {
  let re = '';
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === '*') {
      if (pattern[i + 1] === '*') {
        re += '.*';
        i++;
      } else {
        re += '[^/]*';
      }
    } else {
      re += c.replace(/[.+?^${}()|[\]\\]/g, '\\$&');
    }
  }
  return new RegExp(`^${re}$`);
}

/** A segment without its path parameters: everything from the first `;` on, as Tomcat strips it. */
const withoutParams = (segment: string): string => segment.split(';', 1)[0]!;

const isDotSegment = (segment: string): boolean => segment === '.' || segment === '..';

function safeDecode(text: string): string | null {
  try {
    return decodeURIComponent(text);
  } catch {
    return null;
  }
}

/**
 * Canonical form of a request path (query removed): path parameters stripped from each segment
 * the way Tomcat strips them (literal `;` and decoded `%3B` alike), percent-decoded, dot segments
 * resolved, duplicate slashes kept as they are. Returns null, which the gateway treats as a
 * non-match, when the path cannot be decoded, climbs above the root, or is ambiguous: a dot
 * segment that is one only once a parameter is stripped (`..;`), an encoded slash is split
 * (`..%2F`) or a dot decoded (`%2e%2e`), a dot segment after an empty one (`//..`), or a
 * fragment (`#`). `..;` means `/admin/..;/v1/x` to Tomcat and a path under `/admin` to a server that keeps
 * the `;`, so no reading of it may enter (or leave) a rule.
 */
export function canonicalRequestPath(rawPath: string): string | null {
  const path = rawPath.split('?', 1)[0]!;
  // A fragment is not sent by browsers, but Node forwards one: `/admin#/../v1/x` is `/admin` to
  // servers that parse it as a URL and `/v1/x` to those that do not.
  if (!path.startsWith('/') || path.includes('#')) return null;
  const segments: string[] = [];
  const raws = path.split('/').slice(1);
  for (const [i, raw] of raws.entries()) {
    // A backslash or NUL anywhere, parameters included, is read as a separator or an end by some.
    if (/\\|\0|%5c|%00/i.test(raw)) return null;
    // `//..` climbs out of the empty segment here and out of the one before to servers that merge
    // slashes first (nginx, Tomcat); an encoded dot is a dot segment only to servers that decode
    // before they route. Either reading may enter or leave a rule, so neither is taken.
    if (isDotSegment(withoutParams(raw)) && i > 0 && raws[i - 1] === '') return null;
    if (/%2e/i.test(raw) && isDotSegment(withoutParams(safeDecode(raw) ?? ''))) return null;
    let decoded: string;
    try {
      decoded = decodeURIComponent(withoutParams(raw));
    } catch {
      return null;
    }
    // An encoded slash separates segments here, as it does for the servers that decode it.
    const parts = decoded.split('/');
    const rewritten = parts.length > 1 || raw.includes(';') || decoded.includes(';');
    for (const part of parts) {
      const segment = withoutParams(part);
      if (rewritten && isDotSegment(segment)) return null;
      segments.push(segment);
    }
  }
  const out: string[] = [];
  for (const seg of segments) {
    if (seg === '.') continue;
    if (seg === '..') {
      if (out.length === 0) return null;
      out.pop();
      continue;
    }
    out.push(seg);
  }
  return '/' + out.join('/');
}

export function pathMatches(pattern: string, rawPath: string): boolean {
  const path = canonicalRequestPath(rawPath);
  return path !== null && compilePathGlob(pattern).test(path);
}
