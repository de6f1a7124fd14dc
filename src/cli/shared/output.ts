/**
 * What the client commands print: the API's own objects as JSON with --json (so a script sees
 * exactly what docs/api.md describes), aligned tables and `key: value` blocks for people. Every
 * cell and value of those is printed with its control characters visible (visible.ts): many
 * hold what a guest wrote, and a terminal would obey them.
 */
import { visibleLine } from './visible.js';

export function printJson(value: unknown, stream: NodeJS.WritableStream = process.stdout): void {
  stream.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** One JSON object a line: for streams of records (audit tail -f) that a reader takes one at a time. */
export function printJsonLine(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value)}\n`);
}

/** Columns padded to their widest cell; the last one is not padded, so lines carry no trailing blanks. */
export function formatTable(headers: readonly string[], rawRows: readonly (readonly string[])[]): string {
  const rows = rawRows.map((r) => r.map(visibleLine));
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return `${[headers, ...rows].map(line).join('\n')}\n`;
}

export function printTable(headers: readonly string[], rows: readonly (readonly string[])[]): void {
  process.stdout.write(formatTable(headers, rows));
}

/** `key: value` lines with the values aligned; undefined values are left out. */
export function printFields(fields: Record<string, string | undefined>): void {
  const shown = Object.entries(fields)
    .filter((e): e is [string, string] => e[1] !== undefined)
    .map(([k, v]) => [k, visibleLine(v)] as const);
  const width = Math.max(...shown.map(([k]) => k.length)) + 1;
  process.stdout.write(shown.map(([k, v]) => `${`${k}:`.padEnd(width)} ${v}\n`).join(''));
}

/** How long ago, coarsely: a table's column has no room for more. */
export function age(iso: string, now: number = Date.now()): string {
  const secs = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (Number.isNaN(secs)) return '?';
  if (secs < 60) return `${secs}s`;
  if (secs < 3600) return `${Math.floor(secs / 60)}m`;
  if (secs < 86400) return `${Math.floor(secs / 3600)}h`;
  return `${Math.floor(secs / 86400)}d`;
}

/** `1 host`, `2 hosts`. */
export const plural = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? '' : 's'}`;

export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = n;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${n} B` : `${value.toFixed(1)} ${units[unit]}`;
}
