/**
 * The part's side of child-part.ts: its link to the service on descriptor 3, its settings from
 * the first call, and the drop to its own user before it touches anything a guest or a client sent.
 */
import { Socket } from 'node:net';
import { PartLink } from './part-link.js';

/** How long a stopping part may take, as the service waits for it before it kills it (child-part.ts). */
const STOP_GRACE_MS = 5_000;

export interface PartUser {
  uid: number;
  gid: number;
}

/**
 * Runs the part: `start` gets the settings the service sent and must call dropPrivileges before
 * it reads anything from outside; `stop` runs on SIGTERM, before the process ends. The process
 * also ends when the service closes the link (it stopped, or was killed): a part never outlives
 * the service that runs it.
 */
export function runPart(register: (link: PartLink) => void, start: (settings: unknown, link: PartLink) => Promise<void>, stop: () => Promise<void> | void = () => undefined): void {
  const link = new PartLink(new Socket({ fd: 3, readable: true, writable: true }));
  register(link);
  link.handle('start', (settings) => start(settings, link));
  // The service stopping the part closes the link, then sends SIGTERM: either way `stop` runs
  // once (the API's closes its store), then the process ends.
  let stopping: Promise<void> | null = null;
  const end = () => {
    // A stop that hangs (a client holding a stream open) does not keep the process, nor its port.
    setTimeout(() => process.exit(0), STOP_GRACE_MS).unref();
    stopping ??= Promise.resolve()
      .then(stop)
      .catch(() => undefined)
      .finally(() => process.exit(0));
  };
  link.onClose(end);
  process.once('SIGTERM', end);
}

/**
 * Becomes `user` for good: no supplementary groups, then the group, then the user (root's saved
 * ids go with setuid, and so do all capabilities). Throws unless root can no longer be regained.
 */
export function dropPrivileges(user: PartUser): void {
  if (!Number.isInteger(user.uid) || user.uid <= 0 || !Number.isInteger(user.gid) || user.gid <= 0) throw new Error('a part runs as a user other than root');
  process.setgroups!([]);
  process.setgid!(user.gid);
  process.setuid!(user.uid);
  let regained = false;
  try {
    process.setuid!(0);
    regained = true;
  } catch {
    // what must happen
  }
  if (regained || process.getuid!() !== user.uid || process.geteuid!() !== user.uid || process.getegid!() !== user.gid) throw new Error('the part could not drop its privileges');
}
