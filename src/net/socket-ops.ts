/** The native socket calls of src/net/native/socket_ops.c, typed. */
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { MAX_SNIFF_BYTES, sniff, type Sniffed } from './traffic-sniff.js';

interface SocketOps {
  originalDst(fd: number): { address: string; port: number };
  peek(fd: number, max: number): Buffer | null;
  whenReadable(fd: number, held: number, callback: (ended: boolean) => void): object;
  cancelReadable(waiter: object): void;
  relay(a: number, b: number, tag: number): number;
  closeRelays(tag: number): void;
  relayEvents(callback: (kind: number, value: number) => void): void;
}

// Built by `npm ci` (node-gyp, binding.gyp at the repository root); dist/src/net → build/Release.
const ops = createRequire(import.meta.url)('../../../build/Release/socket_ops.node') as SocketOps;

const RELAY_CLOSED = 0;
const TAG_CLOSED = 1;
/** What to call when each open relay closes, by relay id. */
const onRelayClosed = new Map<number, () => void>();
/** closeRelays calls waiting for the relay thread, by tag. */
const tagsClosing = new Map<number, Array<() => void>>();
/**
 * The event channel does not keep the process alive (relays must not); while a closeRelays is
 * waiting for its answer, this timer does.
 */
let awaitingRelayThread: NodeJS.Timeout | null = null;
ops.relayEvents((kind, value) => {
  if (kind === RELAY_CLOSED) {
    const done = onRelayClosed.get(value);
    onRelayClosed.delete(value);
    done?.();
  } else if (kind === TAG_CLOSED) {
    const waiting = tagsClosing.get(value) ?? [];
    tagsClosing.delete(value);
    if (tagsClosing.size === 0 && awaitingRelayThread !== null) {
      clearInterval(awaitingRelayThread);
      awaitingRelayThread = null;
    }
    for (const resolve of waiting) resolve();
  }
});

/** The file descriptor behind a TCP socket (Node keeps it on the libuv handle). */
export function socketFd(socket: Socket): number {
  const fd = (socket as unknown as { _handle?: { fd?: number } })._handle?.fd;
  if (typeof fd !== 'number' || fd < 0) throw new Error('socket has no file descriptor');
  return fd;
}

export const originalDst = (socket: Socket): { address: string; port: number } => ops.originalDst(socketFd(socket));

/**
 * Joins two connected sockets on the native relay thread (relay_thread.c) and closes Node's
 * handles on them: the bytes then never pass through JavaScript. Neither socket may have read
 * anything yet. `tag` groups relays for closeRelays; `onClosed` runs once the relay has ended.
 */
export function relaySockets(a: Socket, b: Socket, tag: number, onClosed: () => void = () => undefined): void {
  const id = ops.relay(socketFd(a), socketFd(b), tag);
  onRelayClosed.set(id, onClosed);
  a.destroy();
  b.destroy();
}

/** Resets every relay made with `tag`; resolves once the relay thread has done it. */
export function closeRelays(tag: number): Promise<void> {
  return new Promise((resolve) => {
    tagsClosing.set(tag, [...(tagsClosing.get(tag) ?? []), resolve]);
    awaitingRelayThread ??= setInterval(() => undefined, 60_000);
    ops.closeRelays(tag);
  });
}

/** Bytes waiting on the socket, not consumed: null when none yet, empty when the peer closed. */
export const peekBytes = (socket: Socket, max: number): Buffer | null => ops.peek(socketFd(socket), max);

/** A ClientHello or request line that has not arrived whole by then is taken as something else. */
const SNIFF_DEADLINE_MS = 5000;
/**
 * Peeks taken as soon as bytes arrive; after these, a connection whose first bytes keep coming in
 * small pieces is peeked at most once per TRICKLE_GAP_MS, so that a guest sending a byte per
 * packet costs no more peeks (each a copy of all it sent so far) than it used to when we polled.
 * A real ClientHello fits in one to three segments.
 */
const PROMPT_PEEKS = 3;
const TRICKLE_GAP_MS = 16;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Resolves once `socket` holds more than `held` bytes ('more'), its peer has closed or it failed,
 * or it was closed here ('ended'), or `ms` have passed ('timeout'). Nothing runs meanwhile: the
 * kernel's readiness wakes the event loop (whenReadable in socket_ops.c).
 */
function moreBytes(socket: Socket, held: number, ms: number): Promise<'more' | 'ended' | 'timeout'> {
  return new Promise((resolve) => {
    const finish = (how: 'more' | 'ended' | 'timeout') => {
      clearTimeout(timer);
      socket.off('close', closed);
      resolve(how);
    };
    const waiter = ops.whenReadable(socketFd(socket), held, (ended) => finish(ended ? 'ended' : 'more'));
    // The waiter holds a duplicate of the descriptor: the connection closes only once it lets go.
    const closed = () => {
      ops.cancelReadable(waiter);
      finish('ended');
    };
    const timer = setTimeout(() => {
      ops.cancelReadable(waiter);
      finish('timeout');
    }, ms);
    socket.once('close', closed);
  });
}

/**
 * What a paused socket's client sent first, read without consuming it (whoever takes the socket
 * next, Node's TLS or HTTP server or the native relay, reads it from the kernel), and looked at
 * again only when more has arrived. `silent` when the client has said nothing for `silentMs`.
 */
export async function sniffSocket(socket: Socket, silentMs: number): Promise<Sniffed | { kind: 'silent' }> {
  const start = Date.now();
  let ended = false;
  for (let peeks = 1; ; peeks++) {
    if (socket.destroyed) return { kind: 'other' };
    const buf = peekBytes(socket, MAX_SNIFF_BYTES);
    if (buf !== null) {
      if (buf.length === 0) return { kind: 'other' };
      const s = sniff(buf);
      if (s.kind !== 'incomplete') return s;
    }
    // The first byte may take silentMs; once some came, the rest must come by SNIFF_DEADLINE_MS.
    const left = (buf === null ? silentMs : SNIFF_DEADLINE_MS) - (Date.now() - start);
    // A ClientHello not whole by then, or cut short by its sender, is refused, never decided on the part that came.
    if (ended || (left <= 0 && buf !== null)) return { kind: buf?.[0] === 0x16 ? 'bad_tls' : 'other' };
    if (left <= 0) return { kind: 'silent' };
    if (buf !== null && peeks >= PROMPT_PEEKS) await sleep(TRICKLE_GAP_MS);
    ended = (await moreBytes(socket, buf?.length ?? 0, left)) === 'ended';
  }
}
