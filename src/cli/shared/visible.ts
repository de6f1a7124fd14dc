/**
 * Text that a guest may have written (audit hosts, console logs, names, labels, output in a
 * table) made safe to print on an operator's terminal: its control characters are shown, not
 * obeyed, so that no escape sequence from a guest can write the clipboard (OSC 52), erase a
 * line, move the cursor or retitle the window. They are shown in caret notation, as `cat -v`
 * and `less` show them: ESC as ^[, BEL as ^G, DEL as ^?; the C1 controls (U+0080 to U+009F),
 * which some terminals obey as ESC sequences, as <U+009B>.
 */

const C0_OR_DEL = /[\x00-\x1f\x7f]/g;
const C0_BUT_TAB_AND_NEWLINE_OR_DEL = /[\x00-\x08\x0b-\x1f\x7f]/g;
const C1 = /[\x80-\x9f]/g;

const caret = (c: string): string => `^${String.fromCharCode(c.charCodeAt(0) ^ 0x40)}`;
const codePoint = (c: string): string => `<U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}>`;

/** One line (a table's cell, a field's value, a message): every control character visible, tab and newline too. */
export function visibleLine(text: string): string {
  return text.replace(C0_OR_DEL, caret).replace(C1, codePoint);
}

/** Lines (a console log): tab and newline kept, a CR before a newline dropped, every other control character visible. */
export function visibleText(text: string): string {
  return text.replace(/\r+\n/g, '\n').replace(C0_BUT_TAB_AND_NEWLINE_OR_DEL, caret).replace(C1, codePoint);
}
