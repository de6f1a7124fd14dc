/**
 * The host's own non-loopback addresses, which a guest must not reach through the gateway (its
 * services listen there too: SSH, the API on a public bind, a database). They are read at start
 * and read again every few seconds, since interfaces come and go (DHCP, VPNs, containers).
 * Loopback is left to the special ranges, where VESSEL_EGRESS_ALLOW_CIDRS can open it.
 */
import { networkInterfaces } from 'node:os';

/** How often the interfaces are read again. */
const REFRESH_MS = 10_000;

export type InterfaceList = () => ReturnType<typeof networkInterfaces>;

/** Every non-internal address of the interfaces, sorted, without IPv6 zone. */
export function ownAddresses(list: InterfaceList = networkInterfaces): string[] {
  const out = new Set<string>();
  for (const addresses of Object.values(list())) {
    for (const a of addresses ?? []) if (!a.internal) out.add(a.address.replace(/%.*$/, ''));
  }
  return [...out].sort();
}

export class HostAddresses {
  #addresses: string[];
  #timer: NodeJS.Timeout | null = null;

  constructor(
    private readonly list: InterfaceList = networkInterfaces,
    private readonly onChange: (addresses: readonly string[]) => void = () => undefined,
  ) {
    this.#addresses = ownAddresses(list);
  }

  get current(): readonly string[] {
    return this.#addresses;
  }

  /** Reads the interfaces again; tells onChange when the addresses differ. */
  refresh(): void {
    const next = ownAddresses(this.list);
    if (next.join(',') === this.#addresses.join(',')) return;
    this.#addresses = next;
    this.onChange(next);
  }

  start(): void {
    this.#timer ??= setInterval(() => this.refresh(), REFRESH_MS);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }
}
