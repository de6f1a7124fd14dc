/**
 * What a read of the store last answered, kept to answer while the store cannot (issue 30 §4;
 * docs/scaling.md, "What fails when"): a runtime's host, for the calls and ingress requests an
 * API node routes. Only a failed read is answered from here. A read that succeeds replaces what
 * is kept, and one that finds nothing is passed on as nothing, so a deleted runtime is never
 * routed from memory. While the store is down nothing can move a runtime (a move writes it), so
 * the host last read is the host it runs on.
 */
import { VesselError } from '../core/errors.js';

/** Entries kept: a route is a few dozen bytes, and an API node routes far fewer runtimes at once. */
const MAX_ENTRIES = 50_000;

export class LastKnown<V> {
  readonly #values = new Map<string, V>();

  constructor(private readonly maxEntries = MAX_ENTRIES) {}

  /**
   * `read`'s answer, kept under `key` when it is one; when `read` fails as a store fails (not an
   * error of the API's catalogue, which is an answer), what was kept, or the failure.
   */
  async get(key: string, read: () => Promise<V | undefined>): Promise<V | undefined> {
    let value: V | undefined;
    try {
      value = await read();
    } catch (err) {
      const kept = this.#values.get(key);
      if (err instanceof VesselError || kept === undefined) throw err;
      return kept;
    }
    this.#values.delete(key);
    if (value === undefined) return undefined;
    if (this.#values.size >= this.maxEntries) this.#values.delete(this.#values.keys().next().value!);
    this.#values.set(key, value);
    return value;
  }
}
