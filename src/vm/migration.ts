/**
 * Saving and restoring a VM's device state (and its RAM, when it is not in a shared file) through
 * QMP migration. QEMU runs chrooted into an empty directory, so it never opens a path of ours:
 * - out, it writes into one end of a socket pair handed to it with `getfd` (`migrate fd:`), and
 *   the service reads the other end into the file, digesting the stream on its way;
 * - in, the file is one of the descriptors it inherits at spawn, in INCOMING_FDSET
 *   (`migrate-incoming file:/dev/fdset/N`; `fd:` on a file is deprecated).
 */
import { closeSync, constants, createWriteStream, openSync, rmSync } from 'node:fs';
import { Socket } from 'node:net';
import type { ChunkedDigest } from './file-digest.js';
import type { QmpClient } from './qmp-client.js';
import { socketPair } from './vm-ops.js';

/** The fd set through which a QEMU started with `-incoming defer` receives its stream. */
export const INCOMING_FDSET = 1;
/** The name the outgoing stream's socket gets in QEMU (`getfd`), consumed by `migrate fd:`. */
const OUTGOING_FD_NAME = 'migration-out';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function enableIgnoreShared(qmp: QmpClient): Promise<void> {
  await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
}

/**
 * Migrates the (paused) VM into `target`, a new file (never an existing name, never through a
 * symlink), feeding `digest` with the stream on its way. Resolves once QEMU reports completion
 * and the file is written; on failure the file is removed.
 */
export async function migrateToFile(qmp: QmpClient, target: string, digest?: ChunkedDigest, timeoutMs = 120_000): Promise<void> {
  const fileFd = openSync(target, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW, 0o600);
  const out = createWriteStream('', { fd: fileFd });
  const [qemuEnd, ourEnd] = socketPair();
  try {
    await qmp.executeWithFds('getfd', { fdname: OUTGOING_FD_NAME }, [qemuEnd]);
  } catch (err) {
    closeSync(ourEnd);
    out.destroy();
    rmSync(target, { force: true });
    throw err;
  } finally {
    closeSync(qemuEnd);
  }
  const stream = new Socket({ fd: ourEnd, readable: true, writable: false });
  // Set by the stream's callback: `as` keeps TypeScript from taking it for null ever after.
  let writeError = null as Error | null;
  const written = new Promise<void>((resolve) => {
    out.on('finish', resolve);
    out.on('close', resolve);
    out.on('error', (err) => {
      writeError = err;
      resolve();
    });
  });
  // If the file cannot take more (a full disk), cut QEMU off so that its migration fails now
  // instead of blocking on a socket nobody reads.
  out.on('error', () => stream.destroy());
  stream.on('error', (err) => out.destroy(err));
  if (digest !== undefined) stream.on('data', (chunk: Buffer) => digest.update(chunk));
  stream.pipe(out);
  try {
    await enableIgnoreShared(qmp);
    await qmp.execute('migrate', { uri: `fd:${OUTGOING_FD_NAME}` });
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = await qmp.execute<{ status: string; 'error-desc'?: string }>('query-migrate');
      if (m.status === 'completed') break;
      if (m.status === 'failed' || m.status === 'cancelled') {
        // Our side failing (a full disk) is the reason QEMU sees a broken socket: report ours.
        throw writeError ?? new Error(`migration ${m.status}: ${m['error-desc'] ?? 'no reason given'}`);
      }
      if (Date.now() > deadline) {
        await qmp.execute('migrate_cancel').catch(() => undefined);
        throw new Error('migration timed out');
      }
      await sleep(2);
    }
    await written;
    if (writeError !== null) throw writeError;
  } catch (err) {
    stream.destroy();
    out.destroy();
    rmSync(target, { force: true });
    throw err;
  }
}

/** Loads the stream of INCOMING_FDSET and waits until done; then QEMU lets go of the file. */
export async function migrateFromFdset(qmp: QmpClient, timeoutMs = 60_000): Promise<void> {
  await enableIgnoreShared(qmp);
  await qmp.execute('migrate-incoming', { uri: `file:/dev/fdset/${INCOMING_FDSET}` });
  await waitForIncoming(qmp, timeoutMs);
  // Otherwise QEMU would hold the checkpoint's state file open for as long as the fork runs.
  await qmp.execute('remove-fd', { 'fdset-id': INCOMING_FDSET });
}

async function waitForIncoming(qmp: QmpClient, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const s = await qmp.execute<{ status: string }>('query-status');
    if (s.status !== 'inmigrate') {
      if (s.status !== 'paused' && s.status !== 'running') throw new Error(`restore ended in state ${s.status}`);
      return;
    }
    if (Date.now() > deadline) throw new Error('restore timed out');
    await sleep(2);
  }
}
