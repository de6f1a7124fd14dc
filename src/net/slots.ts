/**
 * Which TAP slot a new runtime gets. A slot is also an identity address, which upstreams, the
 * gateway's own sockets and conntrack have seen as that runtime: a freed slot is therefore
 * quarantined for a while before it is handed out again, so that nothing still in flight for the
 * old runtime (a late packet, a connection a peer still believes open) reaches the next one.
 * Quarantine lives in memory: after a restart every connection of the old process is gone anyway.
 */
import { MAX_SLOT, slotOfTap, tapName } from './addressing.js';

/** How long a freed slot rests: longer than a TCP TIME_WAIT (60 s on Linux). */
export const SLOT_QUARANTINE_MS = 90_000;

export class SlotAllocator {
  /** Freed slot → when it may be used again. */
  readonly #resting = new Map<number, number>();

  constructor(
    private readonly quarantineMs = SLOT_QUARANTINE_MS,
    private readonly now: () => number = Date.now,
  ) {}

  /** The lowest slot that no TAP in `used` holds and that is not resting. */
  lowestFree(used: ReadonlySet<string>): string {
    const now = this.now();
    for (const [slot, until] of this.#resting) if (until <= now) this.#resting.delete(slot);
    for (let slot = 1; slot <= MAX_SLOT; slot++) if (!used.has(tapName(slot)) && !this.#resting.has(slot)) return tapName(slot);
    throw new Error('no free network slot');
  }

  /** The TAP's slot rests before it is handed out again. */
  release(tap: string): void {
    const slot = slotOfTap(tap);
    if (slot !== null) this.#resting.set(slot, this.now() + this.quarantineMs);
  }
}
