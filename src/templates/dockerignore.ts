/**
 * `.dockerignore`, as Docker reads it (moby/patternmatcher and its `ignorefile`): one pattern a
 * line, `#` comments, `!` exceptions, the last matching pattern deciding; patterns are Go's
 * filepath.Match (`*` and `?` stay within a path segment, `[a-z]`, `[^a]`, `\` escapes) plus
 * `**` for any number of segments; a pattern that matches a directory excludes what is under it.
 *
 * Our own matcher, not @balena/dockerignore: that one compiles patterns to backtracking regular
 * expressions, and a pattern of eight `**` took 35 s against one 80-character path. The patterns
 * come from users and run on the host, so here each pattern is a small automaton run over the path
 * once, its states as a set (Thompson's construction): time is the pattern's length times the
 * path's, whatever the pattern. A build context's whole filtering is also held to a budget.
 */

/** A .dockerignore larger than this is refused; real ones are a few hundred bytes. */
export const MAX_DOCKERIGNORE_BYTES = 64 * 1024;
/** Steps of all the automata over one context (pattern length × path length, summed). */
export const MATCH_BUDGET = 500_000_000;

export class DockerignoreError extends Error {}

type Token =
  | { kind: 'char'; c: string }
  | { kind: 'one' } // ?: any character but /
  | { kind: 'star' } // *: any run of characters but /
  | { kind: 'dirs' } // **/ (or ** inside a pattern): nothing, or anything ending in /
  | { kind: 'all' } // ** at the end: anything
  | { kind: 'class'; negated: boolean; ranges: [string, string][] };

interface Pattern {
  text: string;
  exclusion: boolean;
  tokens: Token[];
}

/** Go's filepath.Clean for a relative, slash-separated path. */
export function goClean(path: string): string {
  const rooted = path.startsWith('/');
  const out: string[] = [];
  for (const part of path.split('/')) {
    if (part === '' || part === '.') continue;
    if (part === '..') {
      if (out.length > 0 && out.at(-1) !== '..') out.pop();
      else if (!rooted) out.push('..');
      continue;
    }
    out.push(part);
  }
  const joined = out.join('/');
  return rooted ? `/${joined}` : joined === '' ? '.' : joined;
}

function compile(text: string): Token[] {
  const chars = [...text];
  const tokens: Token[] = [];
  // Docker's shortcut for a pattern that is `**` then plain text: a suffix test, so `**foo` also
  // matches `barfoo` (which its regular expression would not). Kept, since it is what Docker does.
  if (/^\*\*[^/*?[\\][^*?[\\]*$/.test(text)) return [{ kind: 'all' }, ...chars.slice(2).map((c): Token => ({ kind: 'char', c }))];
  for (let i = 0; i < chars.length; i++) {
    const ch = chars[i]!;
    if (ch === '*') {
      if (chars[i + 1] === '*') {
        i++;
        if (chars[i + 1] === '/') i++;
        tokens.push(i + 1 === chars.length ? { kind: 'all' } : { kind: 'dirs' });
      } else tokens.push({ kind: 'star' });
    } else if (ch === '?') tokens.push({ kind: 'one' });
    else if (ch === '\\') {
      if (i + 1 === chars.length) throw new DockerignoreError(`pattern '${text}' ends with an escape`);
      tokens.push({ kind: 'char', c: chars[++i]! });
    } else if (ch === '[') {
      let j = i + 1;
      const negated = chars[j] === '^';
      if (negated) j++;
      const ranges: [string, string][] = [];
      const literal = (): string => {
        let c = chars[j++];
        if (c === '\\') c = chars[j++];
        if (c === undefined) throw new DockerignoreError(`pattern '${text}' has an unclosed [`);
        return c;
      };
      for (;;) {
        if (j >= chars.length) throw new DockerignoreError(`pattern '${text}' has an unclosed [`);
        if (chars[j] === ']' && ranges.length > 0) break;
        const lo = literal();
        let hi = lo;
        if (chars[j] === '-' && chars[j + 1] !== ']' && j + 1 < chars.length) {
          j++;
          hi = literal();
          if (hi < lo) throw new DockerignoreError(`pattern '${text}' has a range that runs backwards`);
        }
        ranges.push([lo, hi]);
      }
      tokens.push({ kind: 'class', negated, ranges });
      i = j;
    } else tokens.push({ kind: 'char', c: ch });
  }
  return tokens;
}

const consumes = (t: Token, c: string): boolean => {
  switch (t.kind) {
    case 'char':
      return t.c === c;
    case 'one':
      return c !== '/';
    case 'class':
      return c !== '/' && t.ranges.some(([lo, hi]) => lo <= c && c <= hi) !== t.negated;
    default:
      return false;
  }
};

/** Adds state i and what it reaches without input (through *, ** and **\/, which may match nothing). */
function close(tokens: Token[], states: Uint8Array, i: number): void {
  while (i < tokens.length && states[i] === 0) {
    states[i] = 1;
    const k = tokens[i]!.kind;
    if (k !== 'star' && k !== 'dirs' && k !== 'all') return;
    i++;
  }
  if (i === tokens.length) states[i] = 1;
}

/**
 * Whether `path` is matched whole by a Go filepath.Match pattern (`*`, `?`, `[…]`, `\`), the
 * way COPY and ADD sources are: `*` stays within a segment, and there is no parent matching.
 */
export function globMatches(pattern: string, path: string): boolean {
  const tokens = compile(pattern).map((t): Token => (t.kind === 'dirs' || t.kind === 'all' ? { kind: 'star' } : t));
  const end = tokens.length;
  let states = new Uint8Array(end + 1);
  close(tokens, states, 0);
  for (const c of path) {
    const next = new Uint8Array(end + 1);
    for (let i = 0; i < end; i++) {
      if (states[i] === 0) continue;
      const t = tokens[i]!;
      if (t.kind === 'star') {
        if (c !== '/') close(tokens, next, i);
      } else if (consumes(t, c)) close(tokens, next, i + 1);
    }
    states = next;
  }
  return states[end] === 1;
}

export class Dockerignore {
  readonly #patterns: Pattern[];
  #steps = 0;

  private constructor(patterns: Pattern[]) {
    this.#patterns = patterns;
  }

  /** The file's patterns, read as Docker reads them. */
  static parse(text: string): Dockerignore {
    if (Buffer.byteLength(text) > MAX_DOCKERIGNORE_BYTES) throw new DockerignoreError(`.dockerignore is larger than ${MAX_DOCKERIGNORE_BYTES} bytes`);
    const patterns: Pattern[] = [];
    text.replace(/^\uFEFF/, '').split('\n').forEach((raw, n) => {
      let line = raw.replace(/\r$/, '');
      if (line.startsWith('#')) return;
      line = line.trim();
      if (line === '') return;
      const exclusion = line.startsWith('!');
      if (exclusion) {
        line = line.slice(1).trim();
        if (line === '') throw new DockerignoreError(`.dockerignore line ${n + 1}: '!' alone excludes nothing`);
      }
      let cleaned = goClean(line);
      if (cleaned.length > 1 && cleaned.startsWith('/')) cleaned = cleaned.slice(1);
      try {
        patterns.push({ text: cleaned, exclusion, tokens: compile(cleaned) });
      } catch (err) {
        throw new DockerignoreError(`.dockerignore line ${n + 1}: ${(err as Error).message}`);
      }
    });
    return new Dockerignore(patterns);
  }

  /** Whether any `!` pattern can bring back a path under an ignored directory. */
  get hasExceptions(): boolean {
    return this.#patterns.some((p) => p.exclusion);
  }

  /**
   * Whether `path` (relative to the context, cleaned, slash-separated) is left out of the
   * context: by a pattern that matches it or one of its parent directories, unless a later `!`
   * pattern brings it back.
   */
  ignores(path: string): boolean {
    let matched = false;
    const chars = [...path];
    for (const p of this.#patterns) {
      // As Docker: an inclusion is only worth trying while unmatched, an exclusion once matched.
      if (p.exclusion !== matched) continue;
      if (this.#matchesOrParent(p.tokens, chars)) matched = !p.exclusion;
    }
    return matched;
  }

  /** One run of the pattern's automaton over the path, checking the accept state at each `/`: the parent directories. */
  #matchesOrParent(tokens: Token[], chars: string[]): boolean {
    this.#steps += (tokens.length + 1) * (chars.length + 1);
    if (this.#steps > MATCH_BUDGET) throw new DockerignoreError('.dockerignore is too costly to apply to this many paths: use fewer or shorter patterns');
    const end = tokens.length;
    let states = new Uint8Array(end + 1);
    close(tokens, states, 0);
    for (let pos = 0; pos < chars.length; pos++) {
      const c = chars[pos]!;
      if (c === '/' && states[end] === 1) return true; // a parent directory matches
      const next = new Uint8Array(end + 1);
      let any = false;
      for (let i = 0; i < end; i++) {
        if (states[i] === 0) continue;
        const t = tokens[i]!;
        if (t.kind === 'star') {
          if (c !== '/') {
            close(tokens, next, i);
            any = true;
          }
        } else if (t.kind === 'all') {
          close(tokens, next, i);
          any = true;
        } else if (t.kind === 'dirs') {
          close(tokens, next, i);
          if (c === '/') close(tokens, next, i + 1);
          any = true;
        } else if (consumes(t, c)) {
          close(tokens, next, i + 1);
          any = true;
        }
      }
      if (!any) return false;
      states = next;
    }
    return states[end] === 1;
  }
}
