/** The native calls of src/vm/native/vm_ops.c, typed. */
import { createRequire } from 'node:module';

interface VmOps {
  sendWithFds(socketFd: number, data: Buffer, fds: number[]): number;
  recvWithFds(socketFd: number, maxBytes: number): { data: Buffer; fds: number[]; truncated: boolean };
  connectUnix(path: string): number;
  openTap(name: string): number;
  socketPair(): [number, number];
}

// Built by `npm ci` (node-gyp, binding.gyp at the repository root); dist/src/vm → build/Release.
const ops = createRequire(import.meta.url)('../../../build/Release/vm_ops.node') as VmOps;

/** Sends `data` with the descriptors attached (SCM_RIGHTS); returns how many bytes went. Never blocks: throws EAGAIN instead. */
export const sendWithFds = (socketFd: number, data: Buffer, fds: number[]): number => ops.sendWithFds(socketFd, data, fds);

/**
 * One message of at most `maxBytes` (up to 4096) and the descriptor it carried, if any; any
 * further descriptors were closed. `truncated` when the message or its descriptors did not fit.
 * Never blocks: throws (code EAGAIN) when no message waits.
 */
export const recvWithFds = (socketFd: number, maxBytes: number): { data: Buffer; fds: number[]; truncated: boolean } => ops.recvWithFds(socketFd, maxBytes);

/** A descriptor connected to the Unix stream socket at `path`; throws (code EAGAIN) when its listener's backlog is full rather than wait. */
export const connectUnix = (path: string): number => ops.connectUnix(path);

/** A descriptor attached to the existing TAP device `name`, with virtio-net headers as QEMU expects. */
export const openTap = (name: string): number => ops.openTap(name);

/** A connected pair of Unix stream sockets. */
export const socketPair = (): [number, number] => ops.socketPair();
