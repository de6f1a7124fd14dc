/**
 * A cap on the connections one client holds open at once on a listener, and optionally on all
 * clients together. A client is an IPv4 address or an IPv6 /64 (`clientKey`, as the API's rate
 * limiter keys it): one host is usually given a whole /64, so per-address counting let it open
 * 64 connections from each of 2^64 addresses.
 */
import type { Socket } from 'node:net';
import { clientKey } from '../platform/client-key.js';

export class ConnectionsPerSource {
  readonly #open = new Map<string, number>();
  #total = 0;

  constructor(private readonly max: number, private readonly maxTotal = Infinity) {}

  /** Counts `socket` against its client until it closes; false (and nothing counted) when its client, or the total, is at its cap. */
  admit(socket: Socket): boolean {
    const source = clientKey(socket.remoteAddress ?? '');
    const open = this.#open.get(source) ?? 0;
    if (open >= this.max || this.#total >= this.maxTotal) return false;
    this.#open.set(source, open + 1);
    this.#total++;
    socket.once('close', () => {
      this.#total--;
      const n = (this.#open.get(source) ?? 1) - 1;
      if (n > 0) this.#open.set(source, n);
      else this.#open.delete(source);
    });
    return true;
  }
}
