/** A list that the service hands out in pages: iterate its items, or its pages. */
import type { CallOptions } from './transport.js';

export interface ListOptions extends CallOptions {
  /** Items per page (1 to 1000; the service's default is 100). */
  limit?: number | undefined;
}

/** The list query for a page: the limit if given, and the token of the page wanted. */
export const pageQuery = (options: ListOptions, pageToken: string | undefined) => ({
  ...(options.limit === undefined ? {} : { limit: options.limit }),
  ...(pageToken === undefined ? {} : { page_token: pageToken }),
});

export interface Page<T> {
  data: T[];
  /** Present when there is a next page. */
  next_page_token?: string | undefined;
}

export type PageFetcher<T> = (pageToken: string | undefined) => Promise<Page<T>>;

export class Paged<T> implements AsyncIterable<T> {
  readonly #fetchPage: PageFetcher<T>;

  constructor(fetchPage: PageFetcher<T>) {
    this.#fetchPage = fetchPage;
  }

  /** Each page as it is fetched; the next one is asked for only when the loop wants it. */
  async *pages(): AsyncGenerator<Page<T>, void, undefined> {
    let token: string | undefined;
    do {
      const page = await this.#fetchPage(token);
      yield page;
      // A service that handed back the token it was given would keep a loop here forever.
      if (page.next_page_token !== undefined && page.next_page_token === token) throw new Error(`the service repeated page token '${token}'`);
      token = page.next_page_token;
    } while (token !== undefined);
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T, void, undefined> {
    for await (const page of this.pages()) yield* page.data;
  }

  /** Every item of every page: for lists known to be small. */
  async toArray(): Promise<T[]> {
    const all: T[] = [];
    for await (const item of this) all.push(item);
    return all;
  }
}
