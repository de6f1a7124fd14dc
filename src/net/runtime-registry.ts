/**
 * The gateway's view of attached runtimes: each one's policy and rules (replaced live on PATCH),
 * its TAP and identity address, and the DNS answers it was given (pins).
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { EgressSubject } from '../core/ports.js';

export interface Pin {
  host: string;
  /** The address the gateway dials for this pin (the guest may have been shown another one). */
  realIp: string;
  expires: number;
}

/** A pin outlives the DNS TTL the guest saw: resolvers and programs cache answers longer. */
const PIN_LIFETIME_MS = 10 * 60_000;
const MAX_PINS = 4096;

export class RuntimeNet {
  readonly #pins = new Map<string, Pin>();
  /** Upstream connections are pooled per runtime, never shared between tenants' VMs. */
  readonly agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };

  constructor(
    public subject: EgressSubject,
    readonly tap: string,
    readonly identity: string,
  ) {}

  get id(): string {
    return this.subject.runtimeId;
  }

  pin(shownIp: string, host: string, realIp: string): void {
    this.#pins.delete(shownIp);
    this.#pins.set(shownIp, { host, realIp, expires: Date.now() + PIN_LIFETIME_MS });
    if (this.#pins.size > MAX_PINS) this.#pins.delete(this.#pins.keys().next().value!);
  }

  pinned(shownIp: string): Pin | undefined {
    const pin = this.#pins.get(shownIp);
    if (pin === undefined || pin.expires < Date.now()) return undefined;
    return pin;
  }

  close(): void {
    this.agents.http.destroy();
    this.agents.https.destroy();
  }
}

export class RuntimeRegistry {
  readonly #byId = new Map<string, RuntimeNet>();
  readonly #byIdentity = new Map<string, RuntimeNet>();

  add(net: RuntimeNet): void {
    this.#byId.set(net.id, net);
    this.#byIdentity.set(net.identity, net);
  }

  remove(runtimeId: string): RuntimeNet | undefined {
    const net = this.#byId.get(runtimeId);
    if (net === undefined) return undefined;
    this.#byId.delete(runtimeId);
    this.#byIdentity.delete(net.identity);
    net.close();
    return net;
  }

  get = (runtimeId: string): RuntimeNet | undefined => this.#byId.get(runtimeId);
  byIdentity = (address: string | undefined): RuntimeNet | undefined => (address === undefined ? undefined : this.#byIdentity.get(address));
  all = (): RuntimeNet[] => [...this.#byId.values()];
}

/**
 * Addresses shown to guests in place of real ones they could not route to the gateway (their own
 * loopback, link-local): one per name from 198.18.0.0/15, a range never used on the internet.
 */
export class StandInAddresses {
  readonly #byHost = new Map<string, string>();
  #next = 1;

  for(host: string): string {
    let ip = this.#byHost.get(host);
    if (ip === undefined) {
      const n = (198 << 24) + (18 << 16) + (this.#next++ % 131_070);
      ip = [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
      this.#byHost.set(host, ip);
    }
    return ip;
  }
}
