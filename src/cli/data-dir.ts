/** Files the service keeps in its data directory: the lock, the master key and the bootstrap admin token. */
import { randomBytes } from 'node:crypto';
import { chmodSync, chownSync, closeSync, lchownSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { generateTokenValue } from '../core/tokens.js';
import { createFileDurably } from '../platform/durable-files.js';
import type { PartUser } from '../platform/part-process.js';
import { readPrivateFile } from '../platform/private-files.js';
import { prepareSqliteDir, sqliteDir } from '../store/open-store.js';

const lstatExists = (path: string): boolean => lstatSync(path, { throwIfNoEntry: false }) !== undefined;

/**
 * 0700: root's alone. QEMU opens what it needs as root before it drops to its own uid, and is then
 * chrooted away from the data directory; every file of ours inside is 0600.
 */
export function ensureDataDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  // Root's alone, but for the API's group passing through (shareDataDir).
  chmodSync(dir, 0o700 | (statSync(dir).mode & 0o010));
}

/**
 * What the API's process (as `user`) reaches of the data directory: it may pass through it (not
 * list it, nor read or write any file of root's there) to its own directory, the store's.
 */
export function shareDataDir(dir: string, user: PartUser): void {
  chownSync(dir, 0, user.gid);
  chmodSync(dir, 0o710);
  prepareSqliteDir(dir);
  const store = sqliteDir(dir);
  for (const path of [store, ...readdirSync(store).map((name) => join(store, name))]) lchownSync(path, user.uid, user.gid);
}

/** Reads a private file (see readPrivateFile), or creates it once (0600) with the given content. */
function readOrCreate(path: string, make: () => string): { value: string; created: boolean } {
  // lstat: a dangling link exists too, and readPrivateFile refuses it rather than write through it.
  if (lstatExists(path)) return { value: readPrivateFile(path).trim(), created: false };
  const value = make();
  // Durable before anything is sealed with it: a key lost in a crash would lose every secret.
  createFileDurably(path, value + '\n', 0o600);
  return { value, created: true };
}

/** VESSEL_MASTER_KEY is 32 bytes as base64 or hex; otherwise DATA_DIR/master.key, made at first start. */
export function loadMasterKey(dataDir: string, fromEnv: string | undefined): Buffer {
  const text = fromEnv ?? readOrCreate(join(dataDir, 'master.key'), () => randomBytes(32).toString('base64')).value;
  const key = /^[0-9a-f]{64}$/i.test(text) ? Buffer.from(text, 'hex') : Buffer.from(text, 'base64');
  if (key.length !== 32) throw new Error('the master key must be 32 bytes, given as 64 hex digits or base64');
  return key;
}

export function loadAdminToken(dataDir: string, fromEnv: string | undefined): { token: string; created: boolean } {
  if (fromEnv !== undefined) return { token: fromEnv, created: false };
  const { value, created } = readOrCreate(join(dataDir, 'admin-token'), generateTokenValue);
  return { token: value, created };
}

/**
 * One service per data directory: two would adopt the same VMs, fight over one nftables table and
 * break the store's in-process caches. DATA_DIR/service.pid names the owner; a file left by a
 * process that is gone (kill -9) is taken over. Returns the release function for shutdown.
 */
export function lockDataDir(dataDir: string): () => void {
  const path = join(dataDir, 'service.pid');
  for (let attempt = 0; ; attempt++) {
    try {
      const fd = openSync(path, 'wx', 0o600);
      writeSync(fd, `${process.pid}\n`);
      closeSync(fd);
      return () => rmSync(path, { force: true });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || attempt > 0) throw err;
    }
    const owner = Number(readFileSync(path, 'utf8').trim());
    if (owner !== process.pid && isVesselService(owner)) {
      throw new Error(`another Vessel service (pid ${owner}) is using ${dataDir}`);
    }
    rmSync(path, { force: true });
  }
}

function isVesselService(pid: number): boolean {
  if (!Number.isInteger(pid) || pid <= 0) return false;
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return argv.includes('serve') && argv.some((a) => a.endsWith('main.js') || a.endsWith('vessel'));
  } catch {
    return false; // no such process
  }
}
