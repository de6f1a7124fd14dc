/** A cap on the connections one client address holds open at once on a listener. */
import type { Socket } from 'node:net';

export class ConnectionsPerSource {
  readonly #open = new Map<string, number>();

  constructor(private readonly max: number) {}

  /** Counts `socket` against its address until it closes; false (and nothing counted) when the address is at its cap. */
  admit(socket: Socket): boolean {
    const source = socket.remoteAddress ?? '';
    const open = this.#open.get(source) ?? 0;
    if (open >= this.max) return false;
    this.#open.set(source, open + 1);
    socket.once('close', () => {
      const n = (this.#open.get(source) ?? 1) - 1;
      if (n > 0) this.#open.set(source, n);
      else this.#open.delete(source);
    });
    return true;
  }
}
