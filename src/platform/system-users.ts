/**
 * The system users the service's parts run as (docs/security.md, "Processes"). Each is made once,
 * with no home, no shell and no password, and a group of its own.
 */
import { execFileSync } from 'node:child_process';
import type { PartUser } from './part-process.js';

const idOf = (flag: '-u' | '-g', name: string): number | null => {
  try {
    return Number(execFileSync('id', [flag, name], { stdio: ['ignore', 'pipe', 'ignore'] }).toString().trim());
  } catch {
    return null;
  }
};

/** The user `name`, made first when the host has none. */
export function ensureSystemUser(name: string): PartUser {
  if (idOf('-u', name) === null) {
    try {
      execFileSync('useradd', ['--system', '--user-group', '--no-create-home', '--home-dir', '/nonexistent', '--shell', '/usr/sbin/nologin', '--comment', 'Vessel service part', name], { stdio: ['ignore', 'ignore', 'pipe'] });
    } catch (err) {
      // Another service instance on this host may have made it at the same moment.
      if (idOf('-u', name) === null) throw new Error(`could not make the system user ${name}: ${(err as { stderr?: Buffer }).stderr?.toString().trim() ?? (err as Error).message}`);
    }
  }
  const uid = idOf('-u', name);
  const gid = idOf('-g', name);
  if (uid === null || gid === null || uid === 0 || gid === 0) throw new Error(`the system user ${name} must exist and must not be root`);
  return { uid, gid };
}
