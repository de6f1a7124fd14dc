/**
 * Saving a VM's device state (and RAM, when it is not in a shared file) through QMP migration.
 * QEMU runs under seccomp with spawn=deny, so `exec:` URIs are out, and Node cannot pass file
 * descriptors over a socket for `fd:`; QEMU connects to a Unix socket of ours instead, and we
 * write what arrives to the checkpoint file.
 */
import { chmodSync, createWriteStream, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import type { ChunkedDigest } from './file-digest.js';
import type { QmpClient } from './qmp-client.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export async function enableIgnoreShared(qmp: QmpClient): Promise<void> {
  await qmp.execute('migrate-set-capabilities', { capabilities: [{ capability: 'x-ignore-shared', state: true }] });
}

/**
 * Migrates the (paused) VM into `target`, feeding `digest` with the stream on its way. Resolves
 * once QEMU reports completion and the file is flushed.
 */
export async function migrateToFile(qmp: QmpClient, socketPath: string, target: string, digest?: ChunkedDigest, timeoutMs = 120_000): Promise<void> {
  rmSync(socketPath, { force: true });
  const out = createWriteStream(target, { mode: 0o600 });
  let writeError: Error | null = null;
  const written = new Promise<void>((resolve) => {
    out.on('finish', resolve);
    out.on('close', resolve);
    out.on('error', (err) => {
      writeError = err;
      resolve();
    });
  });
  const server = createServer((sock) => {
    sock.on('error', (err) => out.destroy(err));
    // If the file cannot take more (a full disk), cut QEMU off so its migration fails now
    // instead of blocking on a socket nobody reads.
    out.on('error', () => sock.destroy());
    if (digest !== undefined) sock.on('data', (chunk: Buffer) => digest.update(chunk));
    sock.pipe(out);
  });
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  // QEMU runs as its own uid; it must be able to connect.
  chmodSync(socketPath, 0o666);
  try {
    await enableIgnoreShared(qmp);
    await qmp.execute('migrate', { uri: `unix:${socketPath}` });
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
  } finally {
    server.close();
    rmSync(socketPath, { force: true });
  }
}

/**
 * The fd set through which a QEMU started with `-incoming defer` receives its stream (a file
 * handed over at spawn with `-add-fd`): `file:` migration, since `fd:` on a file is deprecated.
 */
export const INCOMING_FDSET = 1;

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
