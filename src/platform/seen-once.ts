/**
 * MACs seen within a window, by their bytes: what makes a signed message good once (a fleet's hop,
 * an ingress entry's PROXY header). Only a holder of the key can add to it, so it holds no more
 * than what the key's holders sent in the window.
 */
export class SeenOnce {
  readonly #until = new Map<string, number>();

  /** `windowMs`: how long a MAC is remembered; at least as long as a message stays acceptable. */
  constructor(private readonly windowMs: number) {}

  /** False when this MAC was seen before. */
  firstTime(macBytes: Buffer, now = Date.now()): boolean {
    const key = macBytes.toString('hex');
    if (this.#until.has(key)) return false;
    this.#until.set(key, now + this.windowMs);
    // Insertion order is expiry order: the stale ones are at the front.
    for (const [seen, until] of this.#until) {
      if (until > now) break;
      this.#until.delete(seen);
    }
    return true;
  }
}
