/**
 * The service's nftables table. It is rendered whole from the list of attached runtimes and
 * loaded in one `nft -f` transaction, so the kernel never holds a half-made rule set, a restart
 * rebuilds it the same way, and whatever a crashed service left behind is replaced.
 *
 * Per packet from a runtime's TAP:
 * - raw prerouting: IPv6 and spoofed sources are dropped; the guest's source address becomes the
 *   runtime's identity address; ICMP is counted per runtime and dropped;
 * - nat prerouting: DNS goes to the gateway's DNS responder, every other TCP connection to the
 *   transparent proxy (which reads the real destination with SO_ORIGINAL_DST);
 * - input: only those two redirected services are reachable on the host;
 * - forward: nothing from or to a TAP is ever routed, so UDP and everything else is dropped;
 * - postrouting: replies get the guest's address back.
 *
 * TAPs are matched by interface index, not by name (`iif`, sets of `iface_index`): nft resolves
 * each name when the table is loaded, so a table that outlives its TAPs (its service killed, its
 * TAPs removed) never matches the TAP another instance makes later under the same name. By name
 * it did, and its input chain dropped that runtime's DNS and connections, which the live table
 * had redirected to ports the stale one did not know. Every TAP named must exist when the table
 * is loaded.
 */
import { GUEST_NETWORK } from '../core/ports.js';
import { runCommand } from '../platform/run-command.js';

export interface NftAttachment {
  tap: string;
  identity: string;
}

export interface RulesetPlan {
  /** The table's name: one per service instance, so two services on a host leave each other alone. */
  table: string;
  proxyPort: number;
  dnsPort: number;
  attachments: readonly NftAttachment[];
}

const counterName = (tap: string): string => `icmp_${tap}`;

function elements(items: string[]): string {
  return items.length === 0 ? '' : ` elements = { ${items.join(', ')} }`;
}

export function renderRuleset(plan: RulesetPlan): string {
  const taps = plan.attachments.map((a) => `"${a.tap}"`);
  const identities = plan.attachments.map((a) => `"${a.tap}" : ${a.identity}`);
  const counters = plan.attachments.map((a) => `"${a.tap}" : "${counterName(a.tap)}"`);
  const g = GUEST_NETWORK;
  return [
    // Declaring the table first makes the delete succeed when it does not exist yet.
    `table inet ${plan.table} {}`,
    `delete table inet ${plan.table}`,
    `table inet ${plan.table} {`,
    `  set taps { type iface_index;${elements(taps)} }`,
    `  map identity { type iface_index : ipv4_addr;${elements(identities)} }`,
    ...plan.attachments.map((a) => `  counter ${counterName(a.tap)} { }`),
    `  map icmp_counter { type iface_index : counter;${elements(counters)} }`,
    `  chain from_guest_raw {`,
    `    type filter hook prerouting priority raw; policy accept;`,
    `    iif != @taps return`,
    `    meta nfproto ipv6 drop`,
    `    ip saddr != ${g.address} drop`,
    `    ip saddr set iif map @identity`,
    `    meta l4proto icmp counter name iif map @icmp_counter drop`,
    `  }`,
    `  chain from_guest_nat {`,
    `    type nat hook prerouting priority dstnat; policy accept;`,
    `    iif != @taps return`,
    `    meta l4proto { tcp, udp } th dport 53 redirect to :${plan.dnsPort}`,
    `    meta l4proto tcp redirect to :${plan.proxyPort}`,
    `  }`,
    `  chain from_guest_input {`,
    `    type filter hook input priority filter; policy accept;`,
    `    iif != @taps return`,
    `    ct state established,related accept`,
    `    ct status dnat tcp dport { ${plan.proxyPort}, ${plan.dnsPort} } accept`,
    `    ct status dnat udp dport ${plan.dnsPort} accept`,
    `    drop`,
    `  }`,
    `  chain guest_forward {`,
    `    type filter hook forward priority filter; policy accept;`,
    `    iif @taps drop`,
    `    oif @taps drop`,
    `  }`,
    `  chain to_guest_raw {`,
    `    type filter hook postrouting priority 300; policy accept;`,
    `    oif @taps ip daddr set ${g.address}`,
    `  }`,
    `}`,
    '',
  ].join('\n');
}

export async function applyRuleset(plan: RulesetPlan): Promise<void> {
  await runCommand('nft', ['-f', '-'], { input: renderRuleset(plan) });
}

export async function removeRuleset(table: string): Promise<void> {
  await runCommand('nft', ['-f', '-'], { input: `table inet ${table} {}\ndelete table inet ${table}\n` });
}

/** Reads and zeroes every runtime's ICMP drop counter in one step: TAP name → packets since last read. */
export async function takeIcmpCounts(table: string): Promise<Map<string, number>> {
  const out = await runCommand('nft', ['-j', 'reset', 'counters', 'table', 'inet', table]);
  const counts = new Map<string, number>();
  const parsed = JSON.parse(out) as { nftables: Array<{ counter?: { name: string; packets: number } }> };
  for (const item of parsed.nftables) {
    const c = item.counter;
    if (c !== undefined && c.name.startsWith('icmp_') && c.packets > 0) counts.set(c.name.slice(5), c.packets);
  }
  return counts;
}
