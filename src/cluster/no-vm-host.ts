/**
 * What an API node (`--role api`) puts where a VM host has its QEMU driver and network gateway:
 * it runs no VMs. The forwarder (forwarder.ts) sends every call that needs one to a VM host before
 * it reaches the core, so the core here only reads and writes the store. A call that reaches
 * either anyway is a routing bug: it fails as `internal`, loudly, rather than pretend.
 */
import { internal } from '../core/errors.js';
import type { NetworkGateway, VmDriver } from '../core/ports.js';

const REASON = 'this API node runs no VMs; the call should have been sent on to a VM host';

/** The calls the core makes at construction and shutdown, which have nothing to do here. */
const IDLE: Partial<VmDriver & NetworkGateway> = {
  unavailableReason: () => REASON,
  onUnexpectedExit: () => undefined,
  close: async () => undefined,
};

function refusing<T extends object>(): T {
  return new Proxy(IDLE, {
    get: (idle, name) =>
      // Not a promise: `await` on it must not call a refusing `then`.
      name === 'then' ? undefined : (idle as Record<PropertyKey, unknown>)[name] ??
      (() => {
        throw internal(`${REASON} (${String(name)})`);
      }),
  }) as T;
}

export const noVmDriver = (): VmDriver => refusing<VmDriver>();
export const noGateway = (): NetworkGateway => refusing<NetworkGateway>();
