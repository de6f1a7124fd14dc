/**
 * The gateway's view of attached runtimes: each one's policy and rules (replaced live on PATCH),
 * its TAP and identity address, the DNS answers it was given (pins), and every connection of its
 * guest that the gateway holds, so that a detach leaves nothing of it behind for the next runtime
 * in the same slot.
 */
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import type { Socket } from 'node:net';
import type { EgressSubject } from '../core/ports.js';
import { closeRelays } from './socket-ops.js';

export interface Pin {
  host: string;
  /** The address the gateway dials for this pin (the guest may have been shown another one). */
  realIp: string;
  expires: number;
}

/** A pin outlives the DNS TTL the guest saw: resolvers and programs cache answers longer. */
const PIN_LIFETIME_MS = 10 * 60_000;
const MAX_PINS = 4096;

/** Tells one attachment's native relays from every other's, also after its slot is reused. */
let lastRelayTag = 0;

export class RuntimeNet {
  readonly #pins = new Map<string, Pin>();
  /** Guest-side sockets the gateway holds for this runtime (egress and ingress), until they close. */
  readonly #sockets = new Set<Socket>();
  /** Upstream connections are pooled per runtime, never shared between tenants' VMs. */
  readonly agents = { http: new HttpAgent({ keepAlive: true }), https: new HttpsAgent({ keepAlive: true }) };
  /** Ingress connections to this guest, pooled apart from egress and from other runtimes. */
  readonly ingressAgent = new HttpAgent({ keepAlive: true });
  /** Marks this runtime's relays on the native relay thread. */
  readonly relayTag = (lastRelayTag = (lastRelayTag % 0xffff_fffe) + 1);
  #closed = false;

  constructor(
    public subject: EgressSubject,
    readonly tap: string,
    readonly identity: string,
  ) {}

  /** Detached: nothing may be forwarded for it any more. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Holds `socket` as this runtime's until it closes; a closed runtime's socket is destroyed at once. */
  track(socket: Socket): void {
    if (this.#closed) return void socket.destroy();
    this.#sockets.add(socket);
    socket.once('close', () => this.#sockets.delete(socket));
  }

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

  /**
   * Ends everything of this runtime the gateway holds: its guest connections (a keep-alive one
   * still carries this runtime's rules), its relays, its upstream pools. Resolves once the relay
   * thread has closed the relays.
   */
  close(): Promise<void> {
    this.#closed = true;
    // A reset, not a FIN: the guest is gone, and a FIN nobody acknowledges keeps the socket in
    // FIN-WAIT-1, with the old identity, for minutes.
    for (const socket of this.#sockets) socket.resetAndDestroy();
    this.#sockets.clear();
    this.agents.http.destroy();
    this.agents.https.destroy();
    this.ingressAgent.destroy();
    return closeRelays(this.relayTag);
  }
}

export class RuntimeRegistry {
  readonly #byId = new Map<string, RuntimeNet>();
  readonly #byIdentity = new Map<string, RuntimeNet>();

  add(net: RuntimeNet): void {
    this.#byId.set(net.id, net);
    this.#byIdentity.set(net.identity, net);
  }

  /** Forgets the runtime and closes everything of it; resolves once its relays are closed. */
  async remove(runtimeId: string): Promise<void> {
    const net = this.#byId.get(runtimeId);
    if (net === undefined) return;
    this.#byId.delete(runtimeId);
    this.#byIdentity.delete(net.identity);
    await net.close();
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
