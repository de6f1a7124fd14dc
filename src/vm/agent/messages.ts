/**
 * Payloads of the vessel-agent protocol (docs/agent-protocol.md, "Messages"): encoders for the
 * requests, checked decoders for what the agent sends. A decoder throws AgentProtocolError on a
 * payload that is too short or inconsistent; the caller ends the channel.
 */
import { AgentProtocolError, HELLO_ACK_BYTES, MAX_PAYLOAD, NONCE_BYTES, SPAWN_FIXED_BYTES } from './frames.js';
import { ERROR_KINDS, WIRE } from './protocol.js';

export const SpawnFlags = { PTY: 1, STDIN: 2, HOLD: 4, FORGET_ON_EXIT: 8, AS_USER: WIRE.SPAWN_AS_USER.value } as const;
export const SPAWN_MAX_GROUPS = WIRE.SPAWN_MAX_GROUPS.value;
export const AttachFlags = { FOLLOW: 1, INPUT: 2, FROM_OLDEST: 4, FROM_END: 8 } as const;
/** ERROR kinds by name, from protocol.ts (the C agent's protocol.h is generated from it). */
export const ErrorKind = Object.fromEntries(Object.entries(ERROR_KINDS).map(([k, v]) => [k, v.value])) as {
  readonly [K in keyof typeof ERROR_KINDS]: (typeof ERROR_KINDS)[K]['value'];
};
export type ErrorKindName = keyof typeof ErrorKind;
const KIND_NAMES = new Map<number, ErrorKindName>(Object.entries(ErrorKind).map(([k, v]) => [v, k as ErrorKindName]));

export const PROC_INFO_BYTES = 68;
/** The command summary a PROC carries (the agent's CMD_SUMMARY): more is a protocol error. */
export const MAX_PROC_COMMAND_BYTES = 256;
export const OUTPUT_PREFIX_BYTES = 12;
export const STAT_BYTES = 32;
export const DIRENT_FIXED_BYTES = 24;
/** Linux's NAME_MAX: a directory entry's name is 1 to 255 bytes. A longer one is a lie. */
export const NAME_MAX = 255;
/** Linux's PATH_MAX counts the NUL: a path a request carries is at most 4095 bytes. */
export const PATH_MAX = 4096;
/** An ERROR's message as the agent writes it (its MAX_ERROR_TEXT); more is not kept. */
export const MAX_ERROR_TEXT = 200;

export type FileType = 'other' | 'file' | 'directory' | 'symlink' | 'char' | 'block' | 'fifo' | 'socket';
const FILE_TYPES: FileType[] = ['other', 'file', 'directory', 'symlink', 'char', 'block', 'fifo', 'socket'];

export interface AgentLimits {
  version: number;
  maxPayload: number;
  maxStreams: number;
  maxProcs: number;
  ringDefault: number;
  ringMax: number;
}

export interface ProcessInfo {
  id: number;
  pid: number;
  state: 'running' | 'exited' | 'signaled';
  pty: boolean;
  stdinOpen: boolean;
  /** The exit status, or the signal number when signaled; 0 while running. */
  code: number;
  /**
   * Wall-clock times in the guest, nanoseconds since the epoch (never negative: Linux does not
   * set CLOCK_REALTIME before 1970); `endNs` is 0n while running.
   */
  startNs: bigint;
  endNs: bigint;
  /** What each output ring retains: [start, end) in bytes since the process began. */
  stdout: { start: bigint; end: bigint };
  stderr: { start: bigint; end: bigint };
  command: string;
}

export interface StatInfo {
  type: FileType;
  mode: number;
  uid: number;
  gid: number;
  size: bigint;
  /** Nanoseconds since the epoch, signed: a file may predate 1970 (see guestDate). */
  mtimeNs: bigint;
}

export interface DirEntry {
  name: string;
  type: FileType;
  mode: number;
  size: bigint;
  mtimeNs: bigint;
}

export interface SpawnRequest {
  argv: string[];
  env?: string[];
  cwd?: string;
  pty?: { rows: number; cols: number };
  stdin?: boolean;
  hold?: boolean;
  forgetOnExit?: boolean;
  /** Per output channel; 0 for the agent's default. */
  ringBytes?: number;
  window: number;
  /** The ids the process runs as (the agent's own, root, without). */
  user?: SpawnUser;
}

/** A user as the kernel knows one: what SPAWN_AS_USER carries. */
export interface SpawnUser {
  uid: number;
  gid: number;
  /** Supplementary groups, at most SPAWN_MAX_GROUPS. */
  groups: number[];
}

const ID_MAX = 0xffffffff;

function userTrailer(user: SpawnUser): Buffer {
  if (user.groups.length > SPAWN_MAX_GROUPS) throw new RangeError(`a user has at most ${SPAWN_MAX_GROUPS} supplementary groups here`);
  for (const id of [user.uid, user.gid, ...user.groups]) if (!Number.isInteger(id) || id < 0 || id > ID_MAX) throw new RangeError(`${id} is not a user or group id`);
  const b = Buffer.alloc(10 + 4 * user.groups.length);
  b.writeUInt32LE(user.uid, 0);
  b.writeUInt32LE(user.gid, 4);
  b.writeUInt16LE(user.groups.length, 8);
  user.groups.forEach((g, i) => b.writeUInt32LE(g, 10 + 4 * i));
  return b;
}

function short(what: string, payload: Buffer, need: number): void {
  if (payload.length < need) throw new AgentProtocolError(`${what} payload of ${payload.length} bytes, expected at least ${need}`);
}

function cString(s: string, what: string): Buffer {
  if (s.includes('\0')) throw new RangeError(`${what} contains a NUL byte`);
  return Buffer.from(`${s}\0`, 'utf8');
}

function checkedPayload(parts: Buffer[], what: string): Buffer {
  const payload = Buffer.concat(parts);
  if (payload.length > MAX_PAYLOAD) throw new RangeError(`${what} is ${payload.length} bytes; a request holds at most ${MAX_PAYLOAD}`);
  return payload;
}

export function encodeSpawn(req: SpawnRequest): Buffer {
  if (req.argv.length === 0 || req.argv.length > 0xffff) throw new RangeError('argv needs 1 to 65535 entries');
  const env = req.env ?? [];
  if (env.length > 0xffff) throw new RangeError('env holds at most 65535 entries');
  const fixed = Buffer.alloc(SPAWN_FIXED_BYTES);
  const flags =
    (req.pty ? SpawnFlags.PTY : 0) | (req.stdin ? SpawnFlags.STDIN : 0) | (req.hold ? SpawnFlags.HOLD : 0) | (req.forgetOnExit ? SpawnFlags.FORGET_ON_EXIT : 0) | (req.user ? SpawnFlags.AS_USER : 0);
  fixed.writeUInt32LE(flags, 0);
  fixed.writeUInt32LE(req.ringBytes ?? 0, 4);
  fixed.writeUInt32LE(req.window, 8);
  fixed.writeUInt16LE(req.pty?.rows ?? 0, 12);
  fixed.writeUInt16LE(req.pty?.cols ?? 0, 14);
  fixed.writeUInt16LE(req.argv.length, 16);
  fixed.writeUInt16LE(env.length, 18);
  const strings = [cString(req.cwd ?? '', 'cwd'), ...req.argv.map((a) => cString(a, 'argv')), ...env.map((e) => cString(e, 'env'))];
  return checkedPayload([fixed, ...strings, ...(req.user ? [userTrailer(req.user)] : [])], 'SPAWN');
}

export function encodeAttach(id: number, flags: number, window: number, stdoutOffset: bigint, stderrOffset: bigint): Buffer {
  const b = Buffer.alloc(32);
  b.writeUInt32LE(id, 0);
  b.writeUInt32LE(flags, 4);
  b.writeUInt32LE(window, 8);
  b.writeBigUInt64LE(stdoutOffset, 16);
  b.writeBigUInt64LE(stderrOffset, 24);
  return b;
}

export function u32s(...values: number[]): Buffer {
  const b = Buffer.alloc(4 * values.length);
  values.forEach((v, i) => b.writeUInt32LE(v >>> 0, 4 * i));
  return b;
}

/**
 * Fixed fields then an absolute path (no NUL, at most PATH_MAX - 1 bytes), as READ_FILE,
 * WRITE_FILE, STAT, ... take them. A longer path is refused here, where the caller can still say
 * so, rather than by the agent with BAD_REQUEST.
 */
export function withPath(fixed: Buffer, path: string): Buffer {
  if (!path.startsWith('/')) throw new RangeError(`'${path}' is not an absolute path`);
  if (path.includes('\0')) throw new RangeError('a path cannot contain NUL');
  const bytes = Buffer.from(path, 'utf8');
  if (bytes.length >= PATH_MAX) throw new RangeError(`a path is at most ${PATH_MAX - 1} bytes, not ${bytes.length}`);
  return checkedPayload([fixed, bytes], 'path');
}

export function encodeIdentity(clockNs: bigint, hostname: string, entropy: Buffer): Buffer {
  const name = Buffer.from(hostname, 'latin1');
  const fixed = Buffer.alloc(12);
  fixed.writeBigUInt64LE(clockNs, 0);
  fixed.writeUInt16LE(name.length, 8);
  fixed.writeUInt16LE(entropy.length, 10);
  return checkedPayload([fixed, name, entropy], 'IDENTITY');
}

export function decodeHelloAck(payload: Buffer, nonce: Buffer): AgentLimits {
  short('HELLO_ACK', payload, HELLO_ACK_BYTES);
  if (!payload.subarray(0, NONCE_BYTES).equals(nonce)) throw new AgentProtocolError('HELLO_ACK carries another nonce');
  return {
    version: payload.readUInt16LE(16),
    maxPayload: payload.readUInt32LE(20),
    maxStreams: payload.readUInt32LE(24),
    maxProcs: payload.readUInt32LE(28),
    ringDefault: payload.readUInt32LE(32),
    ringMax: payload.readUInt32LE(36),
  };
}

export function decodeWindow(payload: Buffer): number {
  if (payload.length !== 4) throw new AgentProtocolError(`WINDOW payload of ${payload.length} bytes`);
  return payload.readUInt32LE(0);
}

const STATES = ['running', 'exited', 'signaled'] as const;

/**
 * A time field: nanoseconds since the epoch as a signed 64-bit integer, which is what the agent's
 * `tv_sec * 1e9 + tv_nsec` in u64 arithmetic is for a time before 1970 (two's complement). Read
 * unsigned, a file of 1960 would say 2544.
 */
const readTimeNs = (payload: Buffer, at: number): bigint => payload.readBigInt64LE(at);

/**
 * A guest time as a Date, rounded down to the millisecond. Total over what a time field can
 * hold: ±2^63 ns is ±9.2e12 ms (1677-09-21 to 2262-04-11), well inside Date's ±8.64e15 ms and
 * within RFC 3339's four-digit years, so no guest value makes an Invalid Date or an extended
 * year. The check below keeps it so should a caller ever pass something wider.
 */
export function guestDate(ns: bigint): Date {
  const ms = ns >= 0n ? ns / 1_000_000n : -((-ns + 999_999n) / 1_000_000n);
  if (ms < -8_640_000_000_000_000n || ms > 8_640_000_000_000_000n) throw new AgentProtocolError(`time ${ns} ns is out of range`);
  return new Date(Number(ms));
}

export function decodeProcInfo(payload: Buffer): ProcessInfo {
  short('PROC', payload, PROC_INFO_BYTES);
  if (payload.length > PROC_INFO_BYTES + MAX_PROC_COMMAND_BYTES) throw new AgentProtocolError(`PROC payload of ${payload.length} bytes`);
  const state = STATES[payload[8]! - 1];
  if (state === undefined) throw new AgentProtocolError(`PROC state ${payload[8]}`);
  const range = (at: number) => {
    const start = payload.readBigUInt64LE(at);
    const end = payload.readBigUInt64LE(at + 8);
    if (start > end) throw new AgentProtocolError('PROC output range ends before it starts');
    return { start, end };
  };
  const time = (at: number, what: string) => {
    const ns = readTimeNs(payload, at);
    // The guest's CLOCK_REALTIME: Linux refuses to set it before 1970 (EINVAL), so no honest
    // agent reports a negative one (in u64 terms, one past 2262).
    if (ns < 0n) throw new AgentProtocolError(`PROC ${what} time ${ns} ns is before 1970`);
    return ns;
  };
  return {
    id: payload.readUInt32LE(0),
    pid: payload.readInt32LE(4),
    state,
    pty: (payload[9]! & 1) !== 0,
    stdinOpen: (payload[9]! & 2) !== 0,
    code: payload.readInt32LE(12),
    startNs: time(20, 'start'),
    endNs: time(28, 'end'),
    stdout: range(36),
    stderr: range(52),
    command: payload.subarray(PROC_INFO_BYTES).toString('utf8'),
  };
}

export interface Output {
  channel: 'stdout' | 'stderr';
  offset: bigint;
  data: Buffer;
}

export function decodeOutput(payload: Buffer): Output {
  short('OUTPUT', payload, OUTPUT_PREFIX_BYTES);
  const c = payload[0];
  if (c !== 1 && c !== 2) throw new AgentProtocolError(`OUTPUT channel ${c}`);
  return { channel: c === 1 ? 'stdout' : 'stderr', offset: payload.readBigUInt64LE(4), data: payload.subarray(OUTPUT_PREFIX_BYTES) };
}

function fileType(code: number): FileType {
  const t = FILE_TYPES[code];
  if (t === undefined) throw new AgentProtocolError(`file type ${code}`);
  return t;
}

export function decodeStat(payload: Buffer): StatInfo {
  if (payload.length !== STAT_BYTES) throw new AgentProtocolError(`STAT payload of ${payload.length} bytes`);
  return {
    type: fileType(payload[0]!),
    mode: payload.readUInt32LE(4),
    uid: payload.readUInt32LE(8),
    gid: payload.readUInt32LE(12),
    size: payload.readBigUInt64LE(16),
    mtimeNs: readTimeNs(payload, 24),
  };
}

const SLASH = 0x2f;
const DOT = 0x2e;

/**
 * A DIR frame's entries. Each name is what readdir(3) can return: 1 to NAME_MAX bytes, no '/' and
 * no NUL, not '.' or '..' (the agent skips those). Anything else is a lie about the directory
 * (a name that would make its entry's path another file's, or a 64 KiB name to fill the host's
 * heap) and ends the channel here, before the entry is kept.
 */
export function decodeDirEntries(payload: Buffer): DirEntry[] {
  const entries: DirEntry[] = [];
  for (let at = 0; at < payload.length; ) {
    short('DIR entry', payload.subarray(at), DIRENT_FIXED_BYTES);
    const nameLength = payload.readUInt16LE(at + 2);
    if (nameLength === 0 || nameLength > NAME_MAX) throw new AgentProtocolError(`DIR entry name of ${nameLength} bytes; a name is 1 to ${NAME_MAX} (NAME_MAX)`);
    const start = at + DIRENT_FIXED_BYTES;
    const end = start + nameLength;
    if (end > payload.length) throw new AgentProtocolError('DIR entry name runs past its frame');
    const name = payload.subarray(start, end);
    if (name.includes(SLASH) || name.includes(0)) throw new AgentProtocolError(`DIR entry name contains '/' or NUL`);
    if (name[0] === DOT && (nameLength === 1 || (nameLength === 2 && name[1] === DOT))) throw new AgentProtocolError(`DIR entry '${name.toString('latin1')}'`);
    entries.push({
      name: name.toString('utf8'),
      type: fileType(payload[at]!),
      mode: payload.readUInt32LE(at + 4),
      size: payload.readBigUInt64LE(at + 8),
      mtimeNs: readTimeNs(payload, at + 16),
    });
    at = end;
  }
  return entries;
}

/** A request the agent refused or could not carry out; the channel itself is fine. */
export class AgentError extends Error {
  override readonly name = 'AgentError';
  constructor(
    readonly kind: ErrorKindName | 'UNKNOWN',
    /** Linux errno, 0 when not a system call's failure. */
    readonly errno: number,
    readonly detail: string,
  ) {
    super(`${kind}${errno ? ` (errno ${errno})` : ''}: ${detail}`);
  }
}

/**
 * An ERROR. Its message reaches API answers and logs, so only what the agent can write
 * (MAX_ERROR_TEXT bytes) is kept of it: a longer one is cut, not refused, as the rest of the
 * frame is sound.
 */
export function decodeError(payload: Buffer): AgentError {
  short('ERROR', payload, 8);
  return new AgentError(KIND_NAMES.get(payload.readUInt16LE(0)) ?? 'UNKNOWN', payload.readInt32LE(4), payload.subarray(8, 8 + MAX_ERROR_TEXT).toString('utf8'));
}
