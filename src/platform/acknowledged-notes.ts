/**
 * Notes that must reach a part which may be away: the egress audits root passes to the API's
 * process, which is started again when it dies (docs/security.md, "Processes"). A batch leaves
 * the queue only once the receiver has answered for it (the API answers once the store holds
 * it); a batch whose call failed goes back to the front and is sent again, so a receiver killed
 * mid-batch, or away for its whole restart, loses nothing. Each note carries an id of its own, so
 * a batch stored just before its receiver died, and sent again, is stored once.
 *
 * One batch is in flight at a time, in order; what comes meanwhile waits and goes in the next.
 * Held notes are bounded: past `maxHeld` the oldest go, counted and reported.
 */
export interface AcknowledgedNotesOptions<T> {
  /** Resolves once the receiver holds `items`; rejects when it does not (away, or refused them). */
  send: (items: T[]) => Promise<void>;
  /** The most notes one call carries. */
  maxBatch: number;
  /** The most notes held while the receiver is away. */
  maxHeld: number;
  /** How long to wait before a failed batch is sent again. */
  retryMs: number;
  /** Told how many notes were dropped since it was last told, before the next batch leaves. */
  onDropped: (dropped: number) => void;
}

export class AcknowledgedNotes<T> {
  #queue: T[] = [];
  #inFlight = false;
  /** How many of the queue's first notes are the batch in flight (fewer once drops took some). */
  #inFlightCount = 0;
  #scheduled = false;
  #retry: NodeJS.Timeout | null = null;
  #dropped = 0;

  constructor(private readonly opts: AcknowledgedNotesOptions<T>) {}

  push(item: T): void {
    this.#queue.push(item);
    const over = this.#queue.length - this.opts.maxHeld;
    if (over > 0) {
      this.#queue.splice(0, over);
      this.#inFlightCount = Math.max(0, this.#inFlightCount - over);
      this.#dropped += over;
    }
    this.#schedule();
  }

  /** Notes not yet answered for, the batch in flight included. */
  get held(): number {
    return this.#queue.length;
  }

  /** Stops retrying; what is held is dropped with the process. */
  close(): void {
    if (this.#retry !== null) clearTimeout(this.#retry);
    this.#retry = null;
  }

  #schedule(): void {
    if (this.#inFlight || this.#scheduled || this.#retry !== null) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      void this.#sendNext();
    });
  }

  async #sendNext(): Promise<void> {
    if (this.#inFlight || this.#queue.length === 0) return;
    if (this.#dropped > 0) {
      this.opts.onDropped(this.#dropped);
      this.#dropped = 0;
    }
    // The batch stays at the queue's front until it is answered for: a drop while it is in
    // flight counts it with the rest, and a failure needs nothing put back.
    const batch = this.#queue.slice(0, this.opts.maxBatch);
    this.#inFlight = true;
    this.#inFlightCount = batch.length;
    let sent = false;
    try {
      await this.opts.send(batch);
      sent = true;
    } catch {
      // Sent again after a pause: the receiver is being started again, or its store refused.
    } finally {
      this.#inFlight = false;
    }
    if (sent) {
      this.#queue.splice(0, this.#inFlightCount);
      this.#inFlightCount = 0;
      this.#schedule();
    } else {
      this.#inFlightCount = 0;
      this.#retry = setTimeout(() => {
        this.#retry = null;
        this.#schedule();
      }, this.opts.retryMs);
    }
  }
}
