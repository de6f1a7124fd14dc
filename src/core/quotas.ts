/**
 * Per-tenant quotas: what one tenant may hold at once, so that it cannot take every VM, all the
 * memory or unbounded checkpoint disk from the others. Host capacity is the driver's business
 * (`unavailable`); a quota is a fixed agreement with the tenant, so exceeding it is
 * failed_precondition: the request can succeed only once the tenant frees something or an
 * operator raises its limit, and waiting alone changes nothing.
 *
 * Limits are the configured defaults, overridden per tenant in the store (`vessel tenant limits
 * set`); both are read at every admission, so a change applies at once.
 */
import { failedPrecondition, invalidArgument } from './errors.js';
import { KeyedMutex } from './keyed-mutex.js';
import type { Store, TenantLimitOverrides } from './ports.js';
import type { Resources, TenantLimits, TenantUsage } from './types.js';

const GiB = 1024 ** 3;

const TENANT_LIMIT_NAMES: ReadonlyArray<keyof TenantLimits> = ['runtimes', 'vcpus', 'memoryMib', 'checkpoints', 'checkpointGib', 'templates', 'templateGib'];

/** A runtime about to hold a VM: a create, a start or resume, or a resize. */
export interface VmRequest {
  runtimeName: string;
  resources: Resources;
  /** A create: the tenant has one runtime more. */
  newRuntime: boolean;
  /** What the runtime holds already and gives up for `resources` (a resize of a live VM); null if it holds nothing. */
  replacing: Resources | null;
}

/** Admitted VM resources, counted against the tenant until the write that makes the store count them. */
export interface VmClaim {
  /**
   * Runs the write after which the store counts the VM (the record's insert, its save as
   * running), then lets the claim go; both under the tenant's lock, so that an admission in
   * between never counts the VM twice, nor not at all.
   */
  commit<T>(write: () => Promise<T>): Promise<T>;
  /** Lets the claim go without a write (the create or start failed). Idempotent. */
  release(): void;
}

type Held = Pick<TenantUsage, 'runtimes' | 'vcpus' | 'memoryMib'>;

const plural = (n: number, noun: string): string => `${n} ${noun}${n === 1 ? '' : 's'}`;

/** "has 50 runtimes, its limit" or, when an operator lowered the limit below what it has, "…; its limit is 10". */
const atLimit = (tenantId: string, n: number, noun: string, limit: number): string =>
  `tenant '${tenantId}' has ${plural(n, noun)}${n === limit ? ', its limit' : `; its limit is ${limit}`}`;

export class TenantQuotas {
  /**
   * A tenant's admissions run one at a time, each check together with the write that consumes
   * what it admitted, so that two concurrent requests never both take the last slot. Within this
   * process that is this lock; where several processes share the store (a fleet on PostgreSQL), a
   * create's check is made again with its record's insert under the store's lock on the tenant
   * (QuotaRepo.exclusive). A start or resume of a stopped runtime is checked by this process
   * alone: two hosts starting two of a tenant's runtimes at the same instant can take it past its
   * vCPU or memory limit by one.
   */
  readonly #lock = new KeyedMutex();
  /** Per tenant, the VMs admitted whose consuming write has not happened yet. */
  readonly #claims = new Map<string, Set<Held>>();

  constructor(
    private readonly store: Store,
    private readonly defaults: TenantLimits,
    /** Disk the tenant holds beyond its checkpoints' sizes: layers of deleted checkpoints still stood on. */
    private readonly orphanedLayerBytes: (tenantId: string) => Promise<number> = async () => 0,
  ) {}

  /** The limits in force for the tenant: its own where an operator set them, else the defaults. */
  async limits(tenantId: string): Promise<TenantLimits> {
    return { ...this.defaults, ...(await this.store.quotas.overrides(tenantId)) };
  }

  usage = (tenantId: string): Promise<TenantUsage> => this.store.quotas.usage(tenantId);

  /** Sets the given limits (null: back to the default) and returns the limits now in force. */
  async setLimits(tenantId: string, overrides: TenantLimitOverrides): Promise<TenantLimits> {
    for (const name of TENANT_LIMIT_NAMES) {
      const value = overrides[name];
      if (value !== undefined && value !== null && !(Number.isSafeInteger(value) && value >= 0)) {
        throw invalidArgument(`the ${name} limit must be a whole number of at least 0, got ${value}`);
      }
    }
    await this.store.quotas.setOverrides(tenantId, overrides);
    return this.limits(tenantId);
  }

  /**
   * Admits a VM of `request.resources` beside everything the tenant holds, or throws
   * failed_precondition naming the limit and the usage. The caller commits the claim with the
   * write that makes the VM count, or releases it.
   */
  claimVm(tenantId: string, request: VmRequest): Promise<VmClaim> {
    return this.#lock.run(tenantId, async () => {
      const more: Held = {
        runtimes: request.newRuntime ? 1 : 0,
        vcpus: Math.max(0, request.resources.vcpus - (request.replacing?.vcpus ?? 0)),
        memoryMib: Math.max(0, request.resources.limits.memory_mib - (request.replacing?.limits.memory_mib ?? 0)),
      };
      await this.#admit(tenantId, request, more, null);
      return this.#hold(tenantId, request, more);
    });
  }

  /** Throws failed_precondition when `more` does not fit beside what the tenant holds (but `own`, a claim of the caller's). */
  async #admit(tenantId: string, request: VmRequest, more: Held, own: Held | null): Promise<void> {
    const [limits, held] = await Promise.all([this.limits(tenantId), this.#held(tenantId, own)]);
    const inVms = `in runtimes with a VM; runtime '${request.runtimeName}' needs`;
    if (held.runtimes + more.runtimes > limits.runtimes) throw failedPrecondition(atLimit(tenantId, held.runtimes, 'runtime', limits.runtimes));
    if (held.memoryMib + more.memoryMib > limits.memoryMib) {
      throw failedPrecondition(
        `tenant '${tenantId}' holds ${held.memoryMib} MiB of memory limits ${inVms} ${more.memoryMib} MiB more, past its limit of ${limits.memoryMib} MiB`,
      );
    }
    if (held.vcpus + more.vcpus > limits.vcpus) {
      throw failedPrecondition(`tenant '${tenantId}' holds ${plural(held.vcpus, 'vCPU')} ${inVms} ${more.vcpus} more, past its limit of ${limits.vcpus}`);
    }
  }

  /**
   * Runs `insert`, the new checkpoint's record, if the tenant has room for one more. Its disk
   * space is known only once it is captured, so the space check refuses a tenant already at or
   * past its limit: the captures it has in flight can take it past, by their size.
   */
  admitCheckpoint<T>(tenantId: string, insert: () => Promise<T>): Promise<T> {
    return this.#lock.run(tenantId, async () => {
      const [limits, usage, orphaned] = await Promise.all([this.limits(tenantId), this.usage(tenantId), this.orphanedLayerBytes(tenantId)]);
      if (usage.checkpoints >= limits.checkpoints) throw failedPrecondition(atLimit(tenantId, usage.checkpoints, 'checkpoint', limits.checkpoints));
      const bytes = usage.checkpointBytes + orphaned;
      if (bytes >= limits.checkpointGib * GiB) {
        const gib = (b: number) => Math.round((b / GiB) * 100) / 100;
        const held = orphaned > 0 ? ` (${gib(orphaned)} GiB of it in disk layers of deleted checkpoints its runtimes or checkpoints still stand on)` : '';
        throw failedPrecondition(`tenant '${tenantId}' has ${gib(bytes)} GiB in checkpoints${held}, at or past its limit of ${limits.checkpointGib} GiB`);
      }
      return insert();
    });
  }

  /**
   * Runs `insert`, the new template's record, if the tenant has room for one more. As with
   * checkpoints, a disk's size is known only once it is built, so the space check refuses a
   * tenant already at or past its limit; builds in flight can take it past by their size.
   */
  admitTemplate<T>(tenantId: string, insert: () => Promise<T>): Promise<T> {
    return this.#lock.run(tenantId, async () => {
      const [limits, usage] = await Promise.all([this.limits(tenantId), this.usage(tenantId)]);
      if (usage.templates >= limits.templates) throw failedPrecondition(atLimit(tenantId, usage.templates, 'template', limits.templates));
      if (usage.templateBytes >= limits.templateGib * GiB) {
        throw failedPrecondition(`tenant '${tenantId}' has ${Math.round((usage.templateBytes / GiB) * 100) / 100} GiB in template disks, at or past its limit of ${limits.templateGib} GiB`);
      }
      return insert();
    });
  }

  /** What the store counts for the tenant plus the claims not written yet, but `own`. */
  async #held(tenantId: string, own: Held | null): Promise<Held> {
    const held: Held = { ...(await this.usage(tenantId)) };
    for (const claim of this.#claims.get(tenantId) ?? []) {
      if (claim === own) continue;
      held.runtimes += claim.runtimes;
      held.vcpus += claim.vcpus;
      held.memoryMib += claim.memoryMib;
    }
    return held;
  }

  #hold(tenantId: string, request: VmRequest, claimed: Held): VmClaim {
    const claims = this.#claims.get(tenantId) ?? new Set<Held>();
    this.#claims.set(tenantId, claims.add(claimed));
    const release = (): void => {
      claims.delete(claimed);
      if (claims.size === 0 && this.#claims.get(tenantId) === claims) this.#claims.delete(tenantId);
    };
    return {
      commit: (write) =>
        this.#lock.run(tenantId, async () => {
          try {
            const quotas = this.store.quotas;
            if (!request.newRuntime || quotas.exclusive === undefined) return await write();
            // Other processes admit against the same store, with claims this one cannot see: a
            // create's record is checked again and inserted under the tenant's lock in the store,
            // which every process takes, so that none admits past a limit.
            return await quotas.exclusive(tenantId, async () => {
              await this.#admit(tenantId, request, claimed, claimed);
              return write();
            });
          } finally {
            release();
          }
        }),
      release,
    };
  }
}
