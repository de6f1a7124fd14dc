/**
 * E2B's sandbox logs from a runtime's console log (docs/e2b.md, "Logs"): the end of what its guest
 * wrote to the serial console, a line an entry. The console keeps no times, so every entry is
 * stamped with the time it was read, and every line is `info`: E2B's cursor, level and direction
 * act on those, never on times or levels guessed from a line's text.
 */
import type { ConsoleLog } from '../core/ports.js';

export const LOG_LEVELS = ['debug', 'info', 'warn', 'error'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** E2B's default and largest page of log entries. */
export const MAX_LOG_ENTRIES = 1000;

export interface LogQuery {
  /** Epoch ms: forward keeps entries from it on, backward up to it. */
  cursor?: number | undefined;
  direction?: 'forward' | 'backward' | undefined;
  /** The lowest level kept. */
  level?: LogLevel | undefined;
  limit?: number | undefined;
  /** A case-sensitive substring of the message. */
  search?: string | undefined;
}

export interface LogEntry {
  timestamp: string;
  level: LogLevel;
  message: string;
  fields: Record<string, string>;
}

/** The console log's lines, oldest first; a first line cut by the read's start is left out. */
export function consoleLines(log: ConsoleLog | null): string[] {
  if (log === null || log.output === '') return [];
  const lines = log.output.split('\n').map((line) => (line.endsWith('\r') ? line.slice(0, -1) : line));
  if (lines.at(-1) === '') lines.pop();
  if (log.truncated) lines.shift();
  return lines;
}

/** E2B's log entries (SandboxLogEntry) of the lines, read at `readAt`, as the query asks. */
export function logEntriesOf(lines: readonly string[], readAt: Date, query: LogQuery): LogEntry[] {
  const at = readAt.getTime();
  const backward = query.direction === 'backward';
  const inWindow = query.cursor === undefined || (backward ? at <= query.cursor : at >= query.cursor);
  const levelKept = LOG_LEVELS.indexOf(query.level ?? 'debug') <= LOG_LEVELS.indexOf('info');
  if (!inWindow || !levelKept) return [];
  const search = query.search;
  const kept = search === undefined || search === '' ? [...lines] : lines.filter((line) => line.includes(search));
  if (backward) kept.reverse();
  const timestamp = readAt.toISOString();
  return kept.slice(0, query.limit ?? MAX_LOG_ENTRIES).map((message) => ({ timestamp, level: 'info' as const, message, fields: {} }));
}
