/**
 * What the agent's process (agent/agent-process.ts) answers, checked by the service before the
 * core sees it. That process parses what guests send, so it is treated as one that may have been
 * taken over: every value is of its type and within the bounds the guest agent itself has, an
 * error is one of the codes guest requests can end in, and anything else is the runtime's agent
 * being unavailable, never the service's problem.
 */
import { ERROR_STATUS, VesselError, unavailable, type ErrorCode } from '../core/errors.js';
import { GUEST_FILE_TYPES, type GuestFileInfo, type GuestFileStat, type ProcessOutput, type ProcessState, type ProcessStatus } from '../core/types.js';
import { LinkClosedError, LinkError, StreamClosedError } from '../platform/part-link.js';
import { MAX_LISTED_ENTRIES, MAX_LISTING_BYTES } from './guest-directories.js';

/** Processes one listing may name: the agent keeps 128. */
export const MAX_LISTED_PROCESSES = 128;
/** A process's command as the agent describes it (its PROC frame holds 256 bytes of it). */
const MAX_COMMAND_CHARS = 4096;
/** An error's message as the service passes it on. */
const MAX_MESSAGE_CHARS = 4096;
/** The codes a request to a guest ends in (guest-errors.ts, guest-processes.ts, guest-exec.ts). */
const GUEST_CODES: ReadonlySet<ErrorCode> = new Set<ErrorCode>(['invalid_argument', 'not_found', 'failed_precondition', 'command_failed', 'internal', 'unavailable']);
/** A listing's entry costs this much of its byte budget besides its name and path (as agent-client.ts counts). */
const ENTRY_FIXED_BYTES = 24;
const STATUSES: ReadonlySet<string> = new Set<ProcessStatus>(['running', 'exited', 'signaled']);
const FILE_TYPES: ReadonlySet<string> = new Set(GUEST_FILE_TYPES);

/** What the agent's process sent that it must not: the request fails as the runtime being unavailable. */
export class BadReply extends Error {
  override readonly name = 'BadReply';
}

const bad = (what: string): never => {
  throw new BadReply(`the agent process sent ${what}`);
};

const record = (v: unknown, what: string): Record<string, unknown> => (typeof v === 'object' && v !== null && !Array.isArray(v) ? (v as Record<string, unknown>) : bad(what));
const count = (v: unknown, what: string, max = Number.MAX_SAFE_INTEGER): number => (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0 && v <= max ? v : bad(what));
const int = (v: unknown, what: string): number => (typeof v === 'number' && Number.isSafeInteger(v) ? v : bad(what));
const bool = (v: unknown, what: string): boolean => (typeof v === 'boolean' ? v : bad(what));
const text = (v: unknown, what: string, max: number): string => (typeof v === 'string' && v.length <= max ? v : bad(what));

function date(v: unknown, what: string): Date {
  const d = new Date(text(v, what, 64));
  return Number.isNaN(d.getTime()) ? bad(what) : d;
}

function range(v: unknown, what: string): { start: number; end: number } {
  const r = record(v, what);
  const start = count(r.start, what);
  const end = count(r.end, what);
  return start <= end ? { start, end } : bad(what);
}

export function processStateOf(raw: unknown): ProcessState {
  const s = record(raw, 'a process that is not an object');
  const status = text(s.status, 'a process status', 16);
  if (!STATUSES.has(status)) bad('a process status of no known kind');
  return {
    id: count(s.id, 'a process id', 0xffffffff),
    pid: count(s.pid, 'a pid', 0xffffffff),
    command: text(s.command, "a process's command", MAX_COMMAND_CHARS),
    status: status as ProcessStatus,
    exitCode: s.exitCode === null ? null : int(s.exitCode, 'an exit code'),
    signal: s.signal === null ? null : int(s.signal, 'a signal'),
    pty: bool(s.pty, 'pty'),
    stdinOpen: bool(s.stdinOpen, 'stdinOpen'),
    startedAt: date(s.startedAt, "a process's start"),
    endedAt: s.endedAt === null ? null : date(s.endedAt, "a process's end"),
    stdout: range(s.stdout, "stdout's range"),
    stderr: range(s.stderr, "stderr's range"),
  };
}

export function processListOf(raw: unknown): ProcessState[] {
  if (!Array.isArray(raw) || raw.length > MAX_LISTED_PROCESSES) bad('a process list that is not a list of at most 128');
  return (raw as unknown[]).map(processStateOf);
}

/** A reader's first offsets (ProcessStream.start). */
export function startOf(raw: unknown): { stdout: number; stderr: number } {
  const s = record(raw, 'offsets that are not an object');
  return { stdout: count(s.stdout, 'an offset'), stderr: count(s.stderr, 'an offset') };
}

/** A chunk of process output: its meta is [channel, offset, lost]. */
export function outputOf(meta: unknown, data: Buffer): ProcessOutput {
  if (!Array.isArray(meta) || meta.length !== 3 || (meta[0] !== 0 && meta[0] !== 1)) bad('output without its channel');
  const m = meta as unknown[];
  return { channel: m[0] === 0 ? 'stdout' : 'stderr', offset: count(m[1], 'an output offset'), data, lost: count(m[2], 'a count of lost bytes') };
}

function described(name: string, path: string, e: { type: unknown; size: unknown; mode: unknown; modified: unknown }): GuestFileInfo {
  const type = text(e.type, 'a file type', 16);
  if (!FILE_TYPES.has(type)) bad('a file type of no known kind');
  return {
    name,
    path,
    type: type as GuestFileInfo['type'],
    size_bytes: count(e.size, 'a file size'),
    mode: count(e.mode, 'a file mode', 0o7777),
    modified_at: date(e.modified, 'a modification time').toISOString(),
  };
}

/** A stat of `path`; the name and path are the request's, not the reply's. */
export function fileStatOf(raw: unknown, path: string, name: string): GuestFileStat {
  const s = record(raw, 'a stat that is not an object');
  return { ...described(name, path, { type: s.type, size: s.size_bytes, mode: s.mode, modified: s.modified_at }), uid: count(s.uid, 'a uid', 0xffffffff), gid: count(s.gid, 'a gid', 0xffffffff) };
}

/**
 * Collects a listing's pages (each chunk: its entry count as meta, a JSON array of entries) with
 * the bounds the guest's listing has: its entries and its bytes, paths included, counted as
 * agent-client.ts counts them. Paths are made here from the directory asked for.
 */
export class ListingCollector {
  readonly entries: GuestFileInfo[] = [];
  #bytes = 0;
  readonly #prefixBytes: number;

  constructor(private readonly prefix: string) {
    this.#prefixBytes = Buffer.byteLength(prefix);
  }

  add(meta: unknown, data: Buffer): void {
    const n = count(meta, "a listing page's count", MAX_LISTED_ENTRIES);
    let page: unknown;
    try {
      page = JSON.parse(data.toString('utf8'));
    } catch {
      bad('a listing page that is not JSON');
    }
    if (!Array.isArray(page) || page.length !== n || this.entries.length + n > MAX_LISTED_ENTRIES) bad('a listing page of another size than it says, or over the entries a listing may have');
    for (const raw of page as unknown[]) {
      if (!Array.isArray(raw) || raw.length !== 5) bad('a listing entry that is not one');
      const [name, type, size, mode, modified] = raw as unknown[];
      if (typeof name !== 'string' || name.length === 0 || name.length > 1024) bad("an entry's name");
      this.#bytes += ENTRY_FIXED_BYTES + Buffer.byteLength(name as string) + this.#prefixBytes;
      if (this.#bytes > MAX_LISTING_BYTES) bad('a listing over the bytes a listing may have');
      this.entries.push(described(name as string, this.prefix + (name as string), { type, size, mode, modified }));
    }
  }
}

/** Bytes written, as a write's reply: at most what the request allowed. */
export const writtenOf = (raw: unknown, maxBytes: number): number => count(raw, 'a count of bytes written over the request', maxBytes);

/**
 * A failure of a call to the agent's process, as the API reports it: the API's own error when
 * the process sent one of the codes a guest request ends in, a refusal of the guest's as
 * internal (as before the split), and anything else (the channel, the process gone, a reply
 * that breaks the rules above) as the runtime being unavailable.
 */
export function partFailure(err: unknown, vmExited: boolean): Error {
  if (err instanceof VesselError) return err;
  const message = (err instanceof Error ? err.message : String(err)).slice(0, MAX_MESSAGE_CHARS);
  if (err instanceof LinkError && typeof err.detail === 'object' && err.detail !== null) {
    const d = err.detail as { kind?: unknown; code?: unknown; httpStatus?: unknown };
    if (d.kind === 'vessel' && typeof d.code === 'string' && GUEST_CODES.has(d.code as ErrorCode)) {
      const code = d.code as ErrorCode;
      const httpStatus = code === 'invalid_argument' && d.httpStatus === 413 ? 413 : ERROR_STATUS[code];
      return new VesselError(code, message, { httpStatus });
    }
    if (d.kind === 'refused') return new VesselError('internal', `the guest agent refused: ${message}`);
  }
  if (vmExited) return unavailable('the VM stopped while the request ran');
  if (err instanceof LinkClosedError) return unavailable(`the agent process ended while the request ran (it is started again): ${message}`);
  if (err instanceof StreamClosedError) return unavailable(`the guest agent channel ended: ${message}`);
  if (err instanceof BadReply) return unavailable(`the runtime's guest agent broke the protocol: ${message}`);
  return unavailable(`the guest agent is not responding: ${message}`);
}
