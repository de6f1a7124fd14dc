/**
 * The composition root: the one place that wires the real adapters (SQLite store, QEMU driver,
 * network gateway) into the core and puts the HTTP facade in front of it.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import pino from 'pino';
import { serviceLogOptions } from '../api/log-options.js';
import { buildApi } from '../api/app.js';
import { Core } from '../core/core.js';
import { SecretBox } from '../core/secret-box.js';
import { CertificateAuthority } from '../net/certificate-authority.js';
import { Gateway } from '../net/gateway.js';
import { openStore } from '../store/open-store.js';
import { chooseAccel } from '../vm/accel.js';
import { VmCgroups } from '../vm/cgroups.js';
import { buildImage } from '../vm/guest-image.js';
import { ensureHostPackages, qemuVersion as qemuVersionOf } from '../vm/host-packages.js';
import { QemuDriver } from '../vm/qemu-driver.js';
import type { Config } from './config.js';
import { ensureDataDir, loadAdminToken, loadMasterKey, lockDataDir } from './data-dir.js';
import { progressDisplay } from './progress.js';

export const imagesDir = (config: Config): string => process.env.VESSEL_IMAGE_DIR ?? join(config.dataDir, 'images');

/** Host packages and the guest image: what `npm start` needs before it can run a VM. */
export async function prepareHost(config: Config, log: pino.Logger) {
  await ensureHostPackages((line) => log.info(line));
  const image = await buildImage({ imagesDir: imagesDir(config), progress: progressDisplay() });
  const qemuVersion = qemuVersionOf()?.text ?? 'unknown';
  const accel = await chooseAccel({ override: config.accel, kernel: image.kernel, cacheFile: join(config.dataDir, 'accel.json'), cacheKey: `${image.kernelVersion}|${qemuVersion}` });
  log.info({ accel: accel.accel, reason: accel.reason }, `accelerator: ${accel.accel}`);
  return { image, accel: accel.accel, qemuVersion };
}

export async function serve(config: Config): Promise<void> {
  const log = pino(serviceLogOptions(config.logLevel));
  // A stray rejection in background work must not take every tenant's API down with it.
  process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
  ensureDataDir(config.dataDir);
  const unlock = lockDataDir(config.dataDir);
  // Before anything slow: a key or token file that others can read is refused at once.
  const secretBox = new SecretBox(loadMasterKey(config.dataDir, config.masterKey));
  const admin = loadAdminToken(config.dataDir, config.adminToken);
  const { image, accel, qemuVersion } = await prepareHost(config, log);

  const store = await openStore(config, { onIdleError: (err) => log.warn({ err }, 'a database connection failed; it is replaced') });
  const ca = await CertificateAuthority.loadOrCreate(config.dataDir);
  const detected = VmCgroups.detect();
  if (detected.cgroups === null) log.warn({ reason: detected.reason }, 'VMs run without cgroup limits');
  else log.info({ version: detected.cgroups.version }, 'each VM runs in a cgroup of its own');
  const driver = new QemuDriver({ dataDir: config.dataDir, image, accel, qemuVersion, guestCaPem: ca.certPem, memoryOvercommit: config.memoryOvercommit, cgroups: detected.cgroups, log });
  const gateway = new Gateway({ instance: createHash('sha256').update(config.dataDir).digest('hex').slice(0, 8), ca, ...config.egress, log });
  await gateway.start();
  const core = new Core({ store, driver, gateway, secretBox, log, tenantLimits: config.tenantLimits, warmPoolSize: config.warmPoolSize });
  gateway.connect(core.egress);

  await core.tokens.installAdmin(admin.token);
  if (admin.created) {
    // Printed once, to the terminal only; the file keeps it for the operator.
    process.stderr.write(`\nAdmin token (also in ${join(config.dataDir, 'admin-token')}):\n  ${admin.token}\n\n`);
  }

  const reconciled = await core.reconcile();
  log.info(reconciled, 'reconciled runtimes with live VMs');
  core.runtimes.startLifecycleTimers(config.idleSuspendSecs);

  const ingress = { domain: config.egress.ingress.domain, port: config.egress.ingress.port };
  const app = await buildApi({
    core,
    logger: log,
    rateLimit: config.rateLimit,
    unauthenticatedRateLimit: config.unauthenticatedRateLimit,
    maxFileBytes: config.maxFileBytes,
    listenHost: config.host,
    ingress,
  });
  await app.listen({ host: config.host, port: config.port });

  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    log.info({ signal }, 'shutting down; VMs keep running');
    await app.close();
    await core.close();
    unlock();
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  process.once('SIGINT', () => void shutdown('SIGINT'));
}
