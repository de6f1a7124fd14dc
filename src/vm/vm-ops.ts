/** The native calls of src/vm/native/vm_ops.c, typed. */
import { createRequire } from 'node:module';

interface VmOps {
  sendWithFds(socketFd: number, data: Buffer, fds: number[]): number;
  openTap(name: string): number;
  socketPair(): [number, number];
}

// Built by `npm ci` (node-gyp, binding.gyp at the repository root); dist/src/vm → build/Release.
const ops = createRequire(import.meta.url)('../../../build/Release/vm_ops.node') as VmOps;

/** Sends `data` with the descriptors attached (SCM_RIGHTS); returns how many bytes went. */
export const sendWithFds = (socketFd: number, data: Buffer, fds: number[]): number => ops.sendWithFds(socketFd, data, fds);

/** A descriptor attached to the existing TAP device `name`, with virtio-net headers as QEMU expects. */
export const openTap = (name: string): number => ops.openTap(name);

/** A connected pair of Unix stream sockets. */
export const socketPair = (): [number, number] => ops.socketPair();
