/**
 * Caps on the egress connections the gateway holds open at once (spliced, intercepted and plain
 * HTTP alike), per runtime and per tenant: each one costs the host descriptors, buffers and an
 * upstream connection, and one runtime, or one tenant's many runtimes, must not exhaust them for
 * everyone else.
 */

/**
 * Open egress connections per runtime: far above what a build or a crawler needs, far below the
 * descriptors (two per spliced connection) and relay buffers (128 KiB each) the host can spare.
 */
export const DEFAULT_MAX_CONNECTIONS_PER_RUNTIME = 256;
/** Open egress connections per tenant, across its runtimes: one tenant cannot starve the others. */
export const DEFAULT_MAX_CONNECTIONS_PER_TENANT = 1024;

export interface ConnectionCaps {
  perRuntime: number;
  perTenant: number;
}

/** An open connection's place under the caps; released once, when the connection ends. */
export interface Lease {
  release(): void;
}

export class ConnectionLimits {
  readonly #byRuntime = new Map<string, number>();
  readonly #byTenant = new Map<string, number>();

  constructor(private readonly caps: ConnectionCaps) {}

  /** A lease for one more connection of this runtime, or null when a cap is reached. */
  open(runtimeId: string, tenantId: string): Lease | null {
    const runtime = this.#byRuntime.get(runtimeId) ?? 0;
    const tenant = this.#byTenant.get(tenantId) ?? 0;
    if (runtime >= this.caps.perRuntime || tenant >= this.caps.perTenant) return null;
    this.#byRuntime.set(runtimeId, runtime + 1);
    this.#byTenant.set(tenantId, tenant + 1);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        decrement(this.#byRuntime, runtimeId);
        decrement(this.#byTenant, tenantId);
      },
    };
  }

  /** Open connections now, for one runtime. */
  count = (runtimeId: string): number => this.#byRuntime.get(runtimeId) ?? 0;
}

function decrement(counts: Map<string, number>, key: string): void {
  const n = (counts.get(key) ?? 0) - 1;
  if (n > 0) counts.set(key, n);
  else counts.delete(key);
}
