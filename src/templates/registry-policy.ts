/**
 * Which registries a template build may pull from. Pulls leave from the API's process directly
 * (skopeo), not through the gateway, so the registry's address is held to the gateway's rule for
 * egress (src/net/blocked-ranges.ts): no loopback, private, link-local, metadata or other special
 * range, and none of the host's own addresses. An operator opens chosen registries by name
 * (VESSEL_TEMPLATE_REGISTRIES_ALLOWED: a local mirror, the tests' loopback registry); those on
 * loopback are pulled over plain HTTP, which nothing between can read or change.
 *
 * The check is of the addresses the registry's name resolves to when the build starts; skopeo
 * resolves the name again, and follows the registry's redirects for blobs (to a CDN, often), and
 * neither is checked here (docs/templates.md, "Registries").
 */
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { invalidArgument } from '../core/errors.js';
import { DialPolicy } from '../net/blocked-ranges.js';
import { ownAddresses } from '../net/host-addresses.js';

/** Docker Hub's registry, which a reference with no registry part names. */
const DOCKER_HUB = 'registry-1.docker.io';

/**
 * The registry (`host` or `host:port`) of an image reference, by Docker's rule: the first
 * component is a registry when it has a `.` or a `:`, or is `localhost`; otherwise Docker Hub.
 */
export function registryOf(reference: string): string {
  const slash = reference.indexOf('/');
  if (slash < 0) return DOCKER_HUB;
  const first = reference.slice(0, slash);
  if (first.includes('.') || first.includes(':') || first === 'localhost') return first.toLowerCase() === 'docker.io' ? DOCKER_HUB : first.toLowerCase();
  return DOCKER_HUB;
}

/** `host[:port]` → its host, brackets of an IPv6 literal removed. */
function hostOf(registry: string): string {
  const v6 = /^\[([^\]]+)\](?::\d+)?$/.exec(registry);
  if (v6 !== null) return v6[1]!;
  const colon = registry.lastIndexOf(':');
  return colon < 0 ? registry : registry.slice(0, colon);
}

const isLoopback = (ip: string): boolean => /^127\./.test(ip) || ip === '::1';

export type Resolve = (host: string) => Promise<string[]>;
const resolveAll: Resolve = async (host) => (await lookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** Checks `host[:port]` entries: names, IPv4 or bracketed IPv6, optional port. */
export function parseRegistryList(raw: string | undefined): string[] {
  const list = (raw ?? '').split(/[\s,]+/).filter((s) => s !== '').map((s) => s.toLowerCase());
  for (const r of list) {
    if (!/^(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9.-]*[a-z0-9])?)(:[0-9]{1,5})?$/.test(r)) throw new Error(`'${r}' is not a registry (host or host:port)`);
  }
  return list;
}

export class RegistryPolicy {
  constructor(
    /** Registries the operator opened, as `host[:port]`, lower case. */
    private readonly allowed: readonly string[] = [],
    private readonly resolve: Resolve = resolveAll,
    private readonly hostAddresses: () => readonly string[] = ownAddresses,
  ) {}

  /**
   * Whether a pull of `reference` may go out, and whether over plain HTTP: throws
   * invalid_argument naming the registry and the address refused.
   */
  async check(reference: string): Promise<{ registry: string; insecure: boolean }> {
    const registry = registryOf(reference);
    const host = hostOf(registry);
    let addresses: string[];
    try {
      addresses = isIP(host) !== 0 ? [host] : await this.resolve(host);
    } catch (err) {
      throw invalidArgument(`registry '${registry}' cannot be resolved: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    if (addresses.length === 0) throw invalidArgument(`registry '${registry}' resolves to no address`);
    if (this.allowed.includes(registry)) return { registry, insecure: addresses.every(isLoopback) };
    const policy = new DialPolicy([], this.hostAddresses());
    const refused = addresses.find((ip) => !policy.mayDial(ip));
    if (refused !== undefined) {
      throw invalidArgument(`registry '${registry}' resolves to ${refused}, an address builds may not pull from (loopback, private, link-local or the host's own); an operator can open it with VESSEL_TEMPLATE_REGISTRIES_ALLOWED`);
    }
    return { registry, insecure: false };
  }
}
