/**
 * A run-once undo stack. Each setup step registers its undo; on failure they run in reverse
 * order, exactly once, so a failed create leaves no process, disk or socket behind.
 */
export class Teardown {
  readonly #steps: Array<() => unknown> = [];
  #ran = false;

  push(undo: () => unknown): void {
    this.#steps.push(undo);
  }

  async run(): Promise<void> {
    if (this.#ran) return;
    this.#ran = true;
    for (const undo of this.#steps.reverse()) {
      try {
        await undo();
      } catch {
        // keep undoing the rest
      }
    }
  }
}
