/**
 * The kernel's connection tracking entries of a detached runtime. Entries for its identity
 * address would otherwise outlive it (an established TCP entry for days), and the next runtime in
 * the same slot would send into the old runtime's flows, NAT mappings included.
 */
import { runCommand } from '../platform/run-command.js';

/** Deletes every entry whose original source is `identity`. None to delete is not an error. */
export async function flushConntrack(identity: string): Promise<void> {
  try {
    await runCommand('conntrack', ['-D', '--orig-src', identity]);
  } catch (err) {
    // conntrack exits 1 when nothing matched; anything else is a real failure.
    if (!/0 flow entries have been deleted/.test((err as Error).message)) throw err;
  }
}
