/**
 * TAP devices, one per runtime, made with iproute2. A TAP carries `<instance>:<runtime id>` as its
 * alias, so after a restart the service finds its own TAPs, and which runtime each belongs to, in
 * the kernel itself; another service instance's TAPs are left alone.
 * Every TAP has the same host MAC and gateway address: a fork keeps its template's ARP entry,
 * and the guest never needs reconfiguring.
 */
import { writeFileSync } from 'node:fs';
import { GUEST_NETWORK } from '../core/ports.js';
import { runCommand } from '../platform/run-command.js';
import { GATEWAY_DEVICE, TAP_PREFIX } from './addressing.js';

const HOST_MAC = '02:76:73:6c:00:01';

const ipBatch = (lines: string[]) => runCommand('ip', ['-batch', '-'], { input: `${lines.join('\n')}\n` });

async function deviceExists(name: string): Promise<boolean> {
  return runCommand('ip', ['link', 'show', 'dev', name]).then(
    () => true,
    () => false,
  );
}

/**
 * A TAP that no VM uses, holding the gateway address so the DNS and proxy listeners can bind it
 * before any runtime exists (a TAP rather than a dummy device: some kernels lack the module).
 */
export async function ensureGatewayDevice(): Promise<void> {
  if (!(await deviceExists(GATEWAY_DEVICE))) {
    // Two services starting at once on one machine (a fleet's hosts in a test) race to make it:
    // the one that loses finds it made, and both then set it up, which is idempotent.
    await runCommand('ip', ['tuntap', 'add', 'dev', GATEWAY_DEVICE, 'mode', 'tap']).catch(async (err: unknown) => {
      if (!(await deviceExists(GATEWAY_DEVICE))) throw err;
    });
  }
  await ipBatch([`addr replace ${GUEST_NETWORK.gateway}/32 dev ${GATEWAY_DEVICE}`, `link set ${GATEWAY_DEVICE} up`]);
}

export async function createTap(tap: string, owner: TapOwner, identity: string): Promise<void> {
  await ipBatch([
    `tuntap add dev ${tap} mode tap`,
    `link set dev ${tap} address ${HOST_MAC} alias ${owner.instance}:${owner.runtimeId}`,
    `addr add ${GUEST_NETWORK.gateway}/32 dev ${tap}`,
    `link set dev ${tap} up`,
    `route replace ${identity}/32 dev ${tap} src ${GUEST_NETWORK.gateway}`,
  ]);
  // The host side needs no IPv6 on a guest link; the filter drops the guest's IPv6 anyway.
  writeFileSync(`/proc/sys/net/ipv6/conf/${tap}/disable_ipv6`, '1');
}

export async function deleteTap(tap: string): Promise<void> {
  await runCommand('ip', ['link', 'del', tap]).catch(() => undefined);
}

export interface TapOwner {
  instance: string;
  runtimeId: string;
}

/** Every runtime TAP on the host, with its owner when it has one. */
export async function listTaps(): Promise<Array<{ tap: string; owner: TapOwner | null }>> {
  const out = await runCommand('ip', ['-j', 'link', 'show']);
  const links = JSON.parse(out) as Array<{ ifname: string; ifalias?: string }>;
  return links
    .filter((l) => l.ifname.startsWith(TAP_PREFIX))
    .map((l) => {
      const [instance, runtimeId] = (l.ifalias ?? '').split(':');
      return { tap: l.ifname, owner: instance && runtimeId ? { instance, runtimeId } : null };
    });
}
