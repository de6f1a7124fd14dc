/**
 * Docker's word rules for the arguments of a Dockerfile instruction: how `ENV`, `LABEL` and `ARG`
 * split into words (quotes keep spaces), and how a word's variables expand (`$VAR`, `${VAR}`,
 * `${VAR:-default}`, `${VAR:+alt}`, `${VAR:?message}` and their colon-less forms) while its quotes
 * and escapes are removed. These follow BuildKit's `shell/lex.go` and `parser/line_parsers.go`;
 * dockerfile-ast gives us the instructions and their text, not these semantics.
 *
 * Everything here is linear in its input: one pass, no backtracking. Expansion can still grow a
 * value (`ENV A=$A$A` doubles it each line), so every expanded word is capped, and so is the
 * nesting of `${…}` (each level is a recursion).
 */

/**
 * The most characters one expanded word may hold: the API's limit for one argument or env value
 * (128 KiB, the kernel's). Counted in UTF-16 units, which keeps the check O(1) per append.
 */
export const MAX_WORD_LENGTH = 128 * 1024;
/** How deeply `${A:-${B:-…}}` may nest. */
export const MAX_NESTING = 16;

export class WordError extends Error {}

/** The variables a word sees: `undefined` is unset, '' is set and empty (which `:-` treats as unset). */
export type Lookup = (name: string) => string | undefined;

/**
 * Splits the arguments of ENV, LABEL and ARG into words as BuildKit's `parseWords` does: blanks
 * separate words outside quotes; quotes and escapes stay in the word, for `expandWord` to remove.
 */
export function splitWords(text: string, escape: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  let quote: string | null = null;
  let blankOk = false;
  const chars = [...text];
  for (let i = 0; i < chars.length; i++) {
    const ch = chars[i]!;
    if (quote === null) {
      if (/\s/.test(ch)) {
        if (inWord && (blankOk || word !== '')) words.push(word);
        inWord = false;
        word = '';
        blankOk = false;
        continue;
      }
      inWord = true;
      if (ch === "'" || ch === '"') {
        quote = ch;
        blankOk = true;
      } else if (ch === escape) {
        if (i + 1 === chars.length) continue; // an escape at the very end is dropped
        word += ch;
        word += chars[++i]!;
        continue;
      }
      word += ch;
    } else {
      if (ch === quote) quote = null;
      else if (ch === escape && quote !== "'") {
        if (i + 1 === chars.length) continue;
        word += ch + chars[++i]!;
        continue;
      }
      word += ch;
    }
  }
  if (inWord && (blankOk || word !== '')) words.push(word);
  return words;
}

const SPECIAL_PARAMS = new Set(['@', '*', '#', '?', '-', '$', '!', '0']);
const isNameChar = (ch: string): boolean => /[A-Za-z0-9_]/.test(ch);

/**
 * A word with its variables expanded and its quotes and escapes removed, as BuildKit's
 * `ProcessWord` does: single quotes keep everything, double quotes still expand `$`, and the
 * escape character (`\`, or the `escape` directive's) makes the next character literal.
 */
export function expandWord(word: string, lookup: Lookup, escape: string): string {
  return new WordExpander([...word], lookup, escape).expand();
}

class WordExpander {
  #pos = 0;
  #depth = 0;

  constructor(
    private readonly chars: string[],
    private readonly lookup: Lookup,
    private readonly escape: string,
  ) {}

  expand(): string {
    return this.#until(null);
  }

  #peek(): string | undefined {
    return this.chars[this.#pos];
  }

  #next(): string | undefined {
    return this.chars[this.#pos++];
  }

  #append(out: string, more: string): string {
    if (out.length + more.length > MAX_WORD_LENGTH) throw new WordError(`a word expands to more than ${MAX_WORD_LENGTH} characters`);
    return out + more;
  }

  /** Everything up to `stop` (consumed), or to the end when `stop` is null. */
  #until(stop: string | null): string {
    let out = '';
    for (;;) {
      const ch = this.#peek();
      if (ch === undefined) {
        if (stop !== null) throw new WordError(`missing '${stop}' in a variable substitution`);
        return out;
      }
      if (ch === stop) {
        this.#pos++;
        return out;
      }
      if (ch === "'") out = this.#append(out, this.#singleQuoted());
      else if (ch === '"') out = this.#append(out, this.#doubleQuoted());
      else if (ch === '$') out = this.#append(out, this.#dollar());
      else if (ch === this.escape) {
        this.#pos++;
        const escaped = this.#next();
        if (escaped === undefined) return out;
        out = this.#append(out, escaped);
      } else out = this.#append(out, this.#next()!);
    }
  }

  #singleQuoted(): string {
    this.#pos++;
    let out = '';
    for (;;) {
      const ch = this.#next();
      if (ch === undefined) throw new WordError('unterminated single quote');
      if (ch === "'") return out;
      out = this.#append(out, ch);
    }
  }

  #doubleQuoted(): string {
    this.#pos++;
    let out = '';
    for (;;) {
      const ch = this.#peek();
      if (ch === undefined) throw new WordError('unterminated double quote');
      if (ch === '"') {
        this.#pos++;
        return out;
      }
      if (ch === '$') {
        out = this.#append(out, this.#dollar());
        continue;
      }
      this.#pos++;
      if (ch === this.escape) {
        const after = this.#peek();
        // Inside double quotes the escape only protects a quote, a dollar or itself.
        if (after === '"' || after === '$' || after === this.escape) {
          this.#pos++;
          out = this.#append(out, after);
          continue;
        }
      }
      out = this.#append(out, ch);
    }
  }

  #name(): string {
    const first = this.#peek();
    if (first === undefined) return '';
    if (/[0-9]/.test(first)) {
      let digits = '';
      while (this.#peek() !== undefined && /[0-9]/.test(this.#peek()!)) digits += this.#next()!;
      return digits;
    }
    if (SPECIAL_PARAMS.has(first)) return this.#next()!;
    let name = '';
    while (this.#peek() !== undefined && isNameChar(this.#peek()!)) name += this.#next()!;
    return name;
  }

  #dollar(): string {
    this.#pos++;
    if (this.#peek() !== '{') {
      const name = this.#name();
      return name === '' ? '$' : (this.lookup(name) ?? '');
    }
    this.#pos++;
    const first = this.#peek();
    if (first === undefined || first === '}' || first === ':' || first === '{') throw new WordError('bad substitution: ${ must be followed by a name');
    const name = this.#name();
    if (name === '') throw new WordError(`bad substitution: '${first}' cannot start a variable name`);
    const value = this.lookup(name);
    const op = this.#next();
    if (op === '}') return value ?? '';
    if (op === undefined) throw new WordError("missing '}' in a variable substitution");
    const colon = op === ':';
    const modifier = colon ? this.#next() : op;
    if (modifier !== '-' && modifier !== '+' && modifier !== '?') {
      throw new WordError(`unsupported modifier '${colon ? ':' : ''}${modifier ?? ''}' in \${${name}…}: only -, +, ? and their : forms are`);
    }
    if (++this.#depth > MAX_NESTING) throw new WordError(`variable substitutions nest more than ${MAX_NESTING} deep`);
    const word = this.#until('}');
    this.#depth--;
    const unset = value === undefined || (colon && value === '');
    if (modifier === '-') return unset ? word : value!;
    if (modifier === '+') return unset ? '' : word;
    if (unset) throw new WordError(`${name}: ${word === '' ? 'is not set' : word}`);
    return value!;
  }
}
