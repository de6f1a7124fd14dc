/** The runtimes of the token's tenant: create, fork, list, get. */
import type { Checkpoint, RuntimeCreateRequest, RuntimeStatus } from './api-types.js';
import type { Checkpoints } from './checkpoints.js';
import { Paged, pageQuery, type ListOptions } from './paging.js';
import { Runtime } from './runtime.js';
import type { CallOptions, Transport } from './transport.js';

export type ForkRequest = Omit<RuntimeCreateRequest, 'checkpoint'>;

export interface RuntimeListOptions extends ListOptions {
  /** Only runtimes with every one of these labels: a value to match, or `true` for the key alone. */
  labels?: Record<string, string | true> | undefined;
  /** Only runtimes in this status, or in any of these. */
  status?: RuntimeStatus | RuntimeStatus[] | undefined;
}

/** The list query's filters: `label=key=value` (or `label=key`) and `status`, each repeated. */
function filterQuery(options: RuntimeListOptions): { label?: string[]; status?: string[] } {
  const labels = Object.entries(options.labels ?? {}).map(([key, value]) => (value === true ? key : `${key}=${value}`));
  const status = options.status === undefined ? [] : [options.status].flat();
  return { ...(labels.length === 0 ? {} : { label: labels }), ...(status.length === 0 ? {} : { status }) };
}

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

  /**
   * Newest first, filtered by `labels` and `status` if given (all must hold); iterate it
   * (`for await`) for the runtimes, or `.pages()` for the pages.
   */
  list(options: RuntimeListOptions = {}): Paged<Runtime> {
    const filter = filterQuery(options);
    return new Paged(async (pageToken) => {
      const page = await this.t.body('idempotent', options, (signal) =>
        this.t.api.GET('/v1/runtimes', { params: { query: { ...filter, ...pageQuery(options, pageToken) } }, signal }),
      );
      return { data: page.data.map((info) => new Runtime(this.t, info)), next_page_token: page.next_page_token };
    });
  }

  /** By id or name. */
  async get(runtime: string, options?: CallOptions): Promise<Runtime> {
    return new Runtime(this.t, await this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/runtimes/{runtime_id}', { params: { path: { runtime_id: runtime } }, signal })));
  }
}
