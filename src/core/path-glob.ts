/**
 * Path patterns of injection rules: `*` matches within one segment, `**` across segments.
 * Request paths are canonicalized before matching so that `/api/../admin` or `%2e%2e` cannot
 * slip a request past (or into) a rule.
 */
import { invalidArgument } from './errors.js';

export const MATCH_ALL_PATHS = '/**';

export function normalizePathPattern(raw: string | null | undefined): string {
  if (raw === null || raw === undefined) return MATCH_ALL_PATHS;
  if (!raw.startsWith('/') || raw.length > 1024 || /[\s?#]/.test(raw)) {
    throw invalidArgument(`path pattern '${raw}' must start with '/' and contain no spaces, '?' or '#'`);
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

/**
 * Canonical form of a request path (query removed): percent-decoded, dot segments resolved,
 * duplicate slashes kept as they are. Returns null when the path tries to climb above the root
 * or cannot be decoded, which the gateway treats as a non-match.
 */
export function canonicalRequestPath(rawPath: string): string | null {
  const path = rawPath.split('?', 1)[0]!;
  if (!path.startsWith('/')) return null;
  let decoded: string;
  try {
    decoded = decodeURIComponent(path);
  } catch {
    return null;
  }
  if (decoded.includes('\\') || decoded.includes('\0')) return null;
  const out: string[] = [];
  for (const seg of decoded.split('/').slice(1)) {
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
