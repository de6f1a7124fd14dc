/**
 * Notes that go out together: what is pushed in one turn of the event loop is sent as one
 * message, at most `max` items each. An audit per egress request was a frame per request on two
 * links; a batch costs the framing once (docs/security.md, "Processes": the cost of the split).
 */
export class NoteBatch<T> {
  #items: T[] = [];
  #scheduled = false;

  constructor(
    private readonly send: (items: T[]) => void,
    private readonly max: number,
  ) {}

  push(item: T): void {
    this.#items.push(item);
    if (this.#items.length >= this.max) this.#flush();
    else if (!this.#scheduled) {
      this.#scheduled = true;
      setImmediate(() => this.#flush());
    }
  }

  #flush(): void {
    this.#scheduled = false;
    if (this.#items.length === 0) return;
    const items = this.#items;
    this.#items = [];
    this.send(items);
  }
}
