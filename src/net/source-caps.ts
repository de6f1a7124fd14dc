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
    const release = this.hold(socket);
    if (release === null) return false;
    socket.once('close', release);
    return true;
  }

  /**
   * Counts `socket` against its client until the returned release runs (once; later calls do
   * nothing): for a connection that outlives its Node socket, as one handed to the native relay
   * does. null (and nothing counted) when its client, or the total, is at its cap. `max` replaces
   * the per-client cap for this connection alone.
   */
  hold(socket: Socket, max = this.max): (() => void) | null {
    return this.holdFor(socket.remoteAddress ?? '', max);
  }

  /**
   * Counts a connection against the client at `address`: one whose peer relays it for that client
   * and vouched for it (a VM host's ingress behind an API node's entry, src/net/proxy-header.ts).
   */
  holdFor(address: string, max = this.max): (() => void) | null {
    const source = clientKey(address);
    const open = this.#open.get(source) ?? 0;
    if (open >= max || this.#total >= this.maxTotal) return null;
    this.#open.set(source, open + 1);
    this.#total++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#total--;
      const n = (this.#open.get(source) ?? 1) - 1;
      if (n > 0) this.#open.set(source, n);
      else this.#open.delete(source);
    };
  }
}
