/**
 * Text a guest wrote, made visible where a browser would hide it: a control character in a text
 * node is never obeyed, but it is not shown either, so an audit's host could carry an escape
 * sequence (an OSC 52 clipboard write, a line erase) meant for a terminal, unseen. Each C0
 * control and DEL is shown as its Unicode control picture (ESC as ␛, BEL as ␇, as the CLI
 * shows ^[ and ^G), each C1 control as <U+009B>.
 */
export function visible(text: string): string {
  return text
    .replace(/[\x00-\x1f]/g, (c) => String.fromCharCode(0x2400 + c.charCodeAt(0)))
    .replace(/\x7f/g, '\u2421')
    .replace(/[\x80-\x9f]/g, (c) => `<U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}>`);
}
