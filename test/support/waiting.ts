/** Polling for what a test waits on: a state that comes about in its own time, never a fixed sleep. */

/** `probe`'s first answer other than undefined, asked every 250 ms for up to `ms`; an error naming `what` after that. */
export async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    const got = await probe();
    if (got !== undefined) return got;
    await new Promise((r) => setTimeout(r, 250));
  }
  throw new Error(`never happened within ${ms} ms: ${what}`);
}
