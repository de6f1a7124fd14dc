/** Checkpoints: list, get, delete, and waiting for one to be ready to fork. */
import type { Checkpoint } from './api-types.js';
import { VesselError } from './errors.js';
import { Paged, pageQuery, type ListOptions } from './paging.js';
import { sleep } from './retry.js';
import type { CallOptions, Transport } from './transport.js';

/** How often a checkpoint still being captured is looked at again: a capture takes about a second or more. */
const READY_POLL_MS = { first: 200, max: 2000 };

export class Checkpoints {
  constructor(private readonly t: Transport) {}

  /** `include_system` adds the service's own templates. */
  list(options: ListOptions & { include_system?: boolean | undefined } = {}): Paged<Checkpoint> {
    const system = options.include_system === undefined ? {} : { include_system: options.include_system };
    return new Paged((pageToken) =>
      this.t.body('idempotent', options, (signal) => this.t.api.GET('/v1/checkpoints', { params: { query: { ...system, ...pageQuery(options, pageToken) } }, signal })),
    );
  }

  /** By id or name. */
  get(checkpoint: string, options?: CallOptions): Promise<Checkpoint> {
    return this.t.call('idempotent', options, (signal) => this.t.api.GET('/v1/checkpoints/{checkpoint_id}', { params: { path: { checkpoint_id: checkpoint } }, signal }));
  }

  /** Its files live on while forks stand on them. */
  async delete(checkpoint: string, options?: CallOptions): Promise<void> {
    await this.t.call('idempotent', options, (signal) => this.t.api.DELETE('/v1/checkpoints/{checkpoint_id}', { params: { path: { checkpoint_id: checkpoint } }, signal }));
  }

  /**
   * The checkpoint once it is `ready`, looking again while it is `creating`; a `failed` one is
   * thrown as failed_precondition. Give a signal to bound the wait.
   */
  async waitUntilReady(checkpoint: Checkpoint | string, options?: CallOptions): Promise<Checkpoint> {
    let current = typeof checkpoint === 'string' ? await this.get(checkpoint, options) : checkpoint;
    for (let delay = READY_POLL_MS.first; current.state === 'creating'; delay = Math.min(delay * 2, READY_POLL_MS.max)) {
      await sleep(delay, options?.signal);
      current = await this.get(current.id, options);
    }
    if (current.state === 'failed') {
      throw new VesselError('failed_precondition', `checkpoint '${current.display_name}' failed${current.state_message === undefined ? '' : `: ${current.state_message}`}`, { status: 0 });
    }
    return current;
  }
}
