/**
 * The host's side of guest/vessel-identity.c: one line through the guest agent gives a VM fresh
 * entropy (with the kernel CRNG reseeded), the clock and its hostname, and the guest's
 * acknowledgement is read back before the VM counts as ready. After a pause only the clock is
 * set again (with fresh entropy, which costs nothing more).
 */
import { randomBytes } from 'node:crypto';
import type { GuestAgentClient } from './guest-agent-client.js';

const REQUEST_FIFO = '/run/vessel/identity';
const ACK_FILE = '/run/vessel/identity.done';
const ENTROPY_BYTES = 64;
/** Linux keeps at most 64 bytes of hostname; display names may be longer. */
const MAX_HOSTNAME = 63;
const ACK_DEADLINE_MS = 5000;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

const guestHostname = (displayName: string): string => displayName.slice(0, MAX_HOSTNAME);

async function writeSmallFile(agent: GuestAgentClient, path: string, text: string): Promise<void> {
  const handle = await agent.call<number>('guest-file-open', { path, mode: 'w' });
  try {
    await agent.call('guest-file-write', { handle, 'buf-b64': Buffer.from(text).toString('base64') });
  } finally {
    await agent.call('guest-file-close', { handle });
  }
}

async function readSmallFile(agent: GuestAgentClient, path: string): Promise<string> {
  const handle = await agent.call<number>('guest-file-open', { path, mode: 'r' });
  try {
    const reply = await agent.call<{ 'buf-b64': string }>('guest-file-read', { handle, count: 256 });
    return Buffer.from(reply['buf-b64'], 'base64').toString();
  } finally {
    await agent.call('guest-file-close', { handle });
  }
}

/**
 * Sets the VM's identity and waits until the guest has applied it. `setClock` is false only for
 * a warm spare being claimed, whose clock has been running since it was set.
 */
export function giveIdentity(agent: GuestAgentClient, hostname: string, setClock: boolean): Promise<void> {
  return request(agent, setClock, guestHostname(hostname));
}

/** The guest's clock stands still while QEMU is stopped (a pause, a checkpoint's capture). */
export function syncClock(agent: GuestAgentClient): Promise<void> {
  return request(agent, true, '-');
}

async function request(agent: GuestAgentClient, setClock: boolean, hostname: string): Promise<void> {
  // A fork inherits its checkpoint's last acknowledgement, so every request needs a fresh id.
  const id = randomBytes(8).toString('hex');
  const clockNs = setClock ? BigInt(Date.now()) * 1_000_000n : 0n;
  const line = `${id} ${clockNs} ${hostname} ${randomBytes(ENTROPY_BYTES).toString('hex')}\n`;
  await writeSmallFile(agent, REQUEST_FIFO, line).catch((err: Error) => {
    throw new Error(`the guest has no vessel-identity (an image older than it?): ${err.message}`);
  });
  const deadline = Date.now() + ACK_DEADLINE_MS;
  for (let attempt = 0; ; attempt++) {
    const ack = (await readSmallFile(agent, ACK_FILE).catch(() => '')).trim();
    if (ack === `${id} ok`) return;
    if (ack.startsWith(`${id} `)) throw new Error('the guest could not apply its identity (entropy, clock or hostname)');
    if (Date.now() > deadline) throw new Error('the guest did not acknowledge its identity');
    await sleep(attempt < 5 ? 1 : 10);
  }
}
