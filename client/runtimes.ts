/** The runtimes of the token's tenant: create, fork, list, get. */
import type { Checkpoint, RuntimeCreateRequest } from './api-types.js';
import type { Checkpoints } from './checkpoints.js';
import { Paged, pageQuery, type ListOptions } from './paging.js';
import { Runtime } from './runtime.js';
import type { CallOptions, Transport } from './transport.js';

export type ForkRequest = Omit<RuntimeCreateRequest, 'checkpoint'>;

export class Runtimes {
  constructor(
    private readonly t: Transport,
    private readonly checkpoints: Checkpoints,
  ) {}

  /** Creates a runtime and answers once it runs. Not retried when unavailable: a VM may have been left in `error` under the name. */
  async create(body: RuntimeCreateRequest, options?: CallOptions): Promise<Runtime> {
    return new Runtime(this.t, await this.t.call('not-idempotent', options, (signal) => this.t.api.POST('/v1/runtimes', { body, signal })));
  }

  /**
   * A new runtime from a checkpoint: its memory, disk and processes, as they were at the
   * capture. A checkpoint still being captured is waited for.
   */
  async fork(checkpoint: Checkpoint | string, body: ForkRequest, options?: CallOptions): Promise<Runtime> {
    const ready = await this.checkpoints.waitUntilReady(checkpoint, options);
    return this.create({ ...body, checkpoint: ready.id }, options);
  }

  /** Newest first; iterate it (`for await`) for the runtimes, or `.pages()` for the pages. */
  list(options: ListOptions = {}): Paged<Runtime> {
    return new Paged(async (pageToken) => {
      const page = await this.t.body('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes', { params: { query: pageQuery(options, pageToken) }, signal }));
      return { data: page.data.map((info) => new Runtime(this.t, info)), next_page_token: page.next_page_token };
    });
  }

  /** By id or name. */
  async get(runtime: string, options?: CallOptions): Promise<Runtime> {
    return new Runtime(this.t, await this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes/{runtime_id}', { params: { path: { runtime_id: runtime } }, signal })));
  }
}
