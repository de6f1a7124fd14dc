/**
 * Files, directories and archives in a running runtime's guest. The guest agent does the work;
 * this service checks who may reach the runtime and the path, and keeps the runtime from idling
 * while a request runs.
 */
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import { invalidArgument } from './errors.js';
import { requireState } from './lifecycle.js';
import type { GuestAgent, GuestAgents } from './ports.js';
import type { RuntimeService } from './runtimes.js';
import type { GuestFileInfo, GuestFileStat } from './types.js';

/** Guest paths for the files API: absolute, no NUL, bounded. */
export function checkGuestPath(path: string): string {
  if (!path.startsWith('/')) throw invalidArgument(`path '${path}' must be absolute`);
  if (path.includes('\0') || path.length > 4096) throw invalidArgument('path must not contain NUL and has at most 4096 characters');
  return path;
}

/**
 * An absolute path a removal may take: `/` under any spelling (`/.`, `//`, `/tmp/..`) would be
 * the whole root file system, and the agent refuses only the literal `/`.
 */
function checkRemovablePath(path: string): string {
  if (posix.normalize(path) === '/') throw invalidArgument(`'${path}' is the root directory, which cannot be removed`);
  return path;
}

export class FileService {
  constructor(
    private readonly runtimes: RuntimeService,
    private readonly guests: GuestAgents,
  ) {}

  readFile(tenantId: string, ref: string, path: string): Promise<Readable> {
    return this.#files(tenantId, ref, path, (guest, p) => guest.readFile(p));
  }

  writeFile(tenantId: string, ref: string, path: string, body: Readable, maxBytes: number): Promise<number> {
    return this.#files(tenantId, ref, path, (guest, p) => guest.writeFile(p, body, maxBytes));
  }

  listDir(tenantId: string, ref: string, path: string): Promise<GuestFileInfo[]> {
    return this.#files(tenantId, ref, path, (guest, p) => guest.listDir(p));
  }

  statPath(tenantId: string, ref: string, path: string, followSymlinks: boolean): Promise<GuestFileStat> {
    return this.#files(tenantId, ref, path, (guest, p) => guest.statPath(p, followSymlinks));
  }

  makeDir(tenantId: string, ref: string, path: string): Promise<void> {
    return this.#files(tenantId, ref, path, (guest, p) => guest.makeDir(p));
  }

  removePath(tenantId: string, ref: string, path: string, recursive: boolean): Promise<void> {
    return this.#files(tenantId, ref, path, (guest, p) => guest.removePath(checkRemovablePath(p), recursive));
  }

  /** Activity from the request until the archive's last byte (or its abort). */
  readArchive(tenantId: string, ref: string, dir: string): Promise<Readable> {
    return this.#files(tenantId, ref, dir, async (guest, p, id) => (await guest.readArchive(p)).once('close', () => this.runtimes.touch(id)));
  }

  writeArchive(tenantId: string, ref: string, dir: string, body: Readable, maxBytes: number): Promise<number> {
    return this.#files(tenantId, ref, dir, (guest, p) => guest.writeArchive(p, body, maxBytes));
  }

  /** What every request on the guest's files shares: a running runtime, an absolute path, activity while it runs. */
  async #files<T>(tenantId: string, ref: string, path: string, work: (guest: GuestAgent, path: string, runtimeId: string) => Promise<T>): Promise<T> {
    const rt = await this.runtimes.get(tenantId, ref);
    requireState('files', rt.status, rt.displayName);
    const checked = checkGuestPath(path);
    return this.runtimes.busy(rt.id, () => work(this.guests.guest(rt.id), checked, rt.id));
  }
}
