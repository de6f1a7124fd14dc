/**
 * Egress decisions shared by the DNS responder and the proxy: whether a runtime may reach a
 * name, and which address the gateway dials for it. Resolution is always the gateway's own.
 */
import { hostAllowed } from '../core/host-pattern.js';
import type { DialPolicy } from './blocked-ranges.js';
import type { NameResolver } from './resolver.js';
import type { RuntimeNet } from './runtime-registry.js';

export type DenyReason =
  | 'host_not_allowed'
  | 'private_address'
  | 'unresolvable'
  | 'not_resolved_by_gateway'
  | 'no_host'
  | 'sni_host_mismatch'
  | 'bad_request'
  | 'method_not_allowed'
  | 'connection_limit';

export type Target = { ok: true; ip: string } | { ok: false; reason: DenyReason };

export class EgressDecisions {
  constructor(
    private readonly resolver: NameResolver,
    private readonly dial: DialPolicy,
  ) {}

  allows(net: RuntimeNet, host: string): boolean {
    const policy = net.subject.policy;
    return !policy.enabled || hostAllowed(policy.allowed_hosts, host);
  }

  mayDial = (ip: string): boolean => this.dial.mayDial(ip);

  /** Addresses of `host` the gateway may dial, or why there are none. */
  async dialable(host: string): Promise<{ addresses: string[]; ttlSecs: number; reason?: DenyReason }> {
    const r = await this.resolver.resolve(host);
    const addresses = r.addresses.filter((ip) => this.dial.mayDial(ip));
    if (addresses.length > 0) return { addresses, ttlSecs: r.ttlSecs };
    return { addresses, ttlSecs: r.ttlSecs, reason: r.addresses.length === 0 ? 'unresolvable' : 'private_address' };
  }

  /**
   * Where a connection to `host` goes: the address the guest was shown for it if the gateway
   * still resolves the name to it, else the gateway's own first answer. Never the guest's pick.
   */
  async target(net: RuntimeNet, host: string, shownIp: string): Promise<Target> {
    if (!this.allows(net, host)) return { ok: false, reason: 'host_not_allowed' };
    const { addresses, reason } = await this.dialable(host);
    if (reason !== undefined) return { ok: false, reason };
    const pin = net.pinned(shownIp);
    if (pin !== undefined && pin.host === host && addresses.includes(pin.realIp)) return { ok: true, ip: pin.realIp };
    return { ok: true, ip: addresses.includes(shownIp) ? shownIp : addresses[0]! };
  }

  /** A connection that names no host is allowed only to an address DNS gave for an allowed name. */
  pinnedTarget(net: RuntimeNet, shownIp: string): Target & { host?: string } {
    const pin = net.pinned(shownIp);
    if (pin === undefined) return { ok: false, reason: 'not_resolved_by_gateway' };
    if (!this.allows(net, pin.host)) return { ok: false, reason: 'host_not_allowed', host: pin.host };
    if (!this.dial.mayDial(pin.realIp)) return { ok: false, reason: 'private_address', host: pin.host };
    return { ok: true, ip: pin.realIp, host: pin.host };
  }
}
