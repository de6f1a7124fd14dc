/**
 * The composition root of the service's root process: the VM driver, the network gateway and the
 * API's own process (api-process.ts, the composition root of the store, the core and the HTTP
 * facade), wired over the host link (src/host).
 */
import { randomUUID } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { serviceLogOptions } from '../api/log-options.js';
import { MIN_SECRET_CHARS } from '../cluster/hop.js';
import { checkNodeKey, hostKey } from '../cluster/fleet-keys.js';
import { hostIdentity } from '../cluster/node-lease.js';
import type { DeliveredAudit } from '../core/egress.js';
import type { GatewayHooks } from '../core/ports.js';
import { serveHost, type HostParts } from '../host/host-server.js';
import { CertificateAuthority } from '../net/certificate-authority.js';
import { E2B_ENVD_PREFIX, ENVD_PORT } from '../e2b/addresses.js';
import { Gateway } from '../net/gateway.js';
import { MAX_AUDIT_BATCH } from '../net/gateway-requests.js';
import { instanceIdOf } from '../platform/instance-id.js';
import { ChildPart } from '../platform/child-part.js';
import { AcknowledgedNotes } from '../platform/acknowledged-notes.js';
import type { PartLink } from '../platform/part-link.js';
import { ensureSystemUser } from '../platform/system-users.js';
import { chooseAccel } from '../vm/accel.js';
import { VmCgroups } from '../vm/cgroups.js';
import { buildImage, guestKitAgent } from '../vm/guest-image.js';
import { ensureHostPackages, qemuVersion as qemuVersionOf } from '../vm/host-packages.js';
import { QemuDriver } from '../vm/qemu-driver.js';
import type { ApiPartSettings, FleetKeySettings, Role } from './api-settings.js';
import type { Config } from './config.js';
import { ensureDataDir, loadAdminToken, loadMasterKey, lockDataDir, shareDataDir } from './data-dir.js';
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
type PreparedHost = Awaited<ReturnType<typeof prepareHost>>;

export { ROLES, type Role } from './api-settings.js';

/** The user the API's process runs as (api-process.ts). */
export const API_USER = 'vessel-api';
/** The API's heap: its caches, request bodies up to their caps, and the stream windows it relays. */
const API_HEAP_MIB = 4096;
/** The API's start reconciles every runtime with its VM and may make the system template first. */
const API_START_TIMEOUT_MS = 15 * 60_000;
/**
 * Egress audits held while the API's process is away: a restart's worth of a busy host's
 * (a few thousand a second for a few seconds). Each is at most a few KiB.
 */
const MAX_HELD_AUDITS = 20_000;
const AUDIT_RETRY_MS = 500;

/**
 * `vessel serve`: the service's root process, which holds what needs root and nothing that parses
 * a client's request (docs/security.md, "Processes"). It reads the keys, prepares the host, and
 * starts the API's process as `vessel-api` (api-process.ts), answering its calls for VMs and their
 * network over one typed link (src/host); those start once the API asks, with the fleet's CA if
 * it has one. When the API's process dies it is started again; the VMs and the network run on.
 */
export async function serve(config: Config, role: Role = 'all'): Promise<void> {
  const log = pino(serviceLogOptions(config.logLevel));
  // A stray rejection in background work must not take the VMs' host down with it.
  process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
  const fleet = role === 'all' ? null : fleetSettings(config, role);
  ensureDataDir(config.dataDir);
  // An API node keeps nothing in its data directory that another process could share by mistake.
  const unlock = role === 'api' ? () => undefined : lockDataDir(config.dataDir);
  // Before anything slow: a key or token file that others can read is refused at once. An
  // enrolled VM host holds no master key: API nodes unseal its secrets (docs/scaling.md).
  const masterKey = fleet?.enrolled === true ? null : loadMasterKey(config.dataDir, config.masterKey);
  const admin = loadAdminToken(config.dataDir, config.adminToken);
  const hostId = role === 'node' ? hostIdentity(config.dataDir) : null;
  const prepared = role === 'api' ? null : await prepareHost(config, log);
  // Templates' guest kit takes the image's own agent; the API's process builds them (docs/templates.md).
  const guestAgent = prepared === null ? null : await guestKitAgent(prepared.image, config.dataDir);
  const user = ensureSystemUser(API_USER);
  shareDataDir(config.dataDir, user);

  // An API process of a service killed a moment ago may still hold the port: it ends when it
  // notices its link closed, but nothing waits for that except this.
  await endLeftoverApi(config.dataDir);
  let host: Promise<HostParts> | null = null;
  const api: ChildPart = new ChildPart({
    name: 'api',
    entry: fileURLToPath(new URL('./api-process.js', import.meta.url)),
    maxHeapMib: API_HEAP_MIB,
    startTimeoutMs: API_START_TIMEOUT_MS,
    settings: (): ApiPartSettings => ({ config, role, fleet, masterKey: masterKey?.toString('base64') ?? null, adminToken: admin.token, hostId, user, guestAgent }),
    handlers: (link) =>
      serveHost(link, (egressCa) => {
        if (prepared === null) return Promise.reject(new Error('an API node runs no VMs'));
        host ??= startHost(config, fleet, prepared, egressCa, api, log);
        return host;
      }),
    onStart: async (_link, pid) => writeFileSync(join(config.dataDir, API_PID_FILE), `${pid}\n`),
    log,
  });
  await api.start();
  if (admin.created && role !== 'node') {
    // Printed once, to the terminal only; the file keeps it for the operator.
    process.stderr.write(`\nAdmin token (also in ${join(config.dataDir, 'admin-token')}):\n  ${admin.token}\n\n`);
  }

  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    log.info({ signal }, role === 'api' ? 'shutting down' : 'shutting down; VMs keep running');
    await api.close();
    const parts = await host?.catch(() => null);
    await parts?.gateway.close();
    await parts?.driver.close();
    unlock();
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  process.once('SIGINT', () => void shutdown('SIGINT'));
}

const API_PID_FILE = 'api.pid';

/** Kills the API process a previous service of this data directory left, and waits until it is gone. */
async function endLeftoverApi(dataDir: string): Promise<void> {
  let pid: number;
  try {
    pid = Number(readFileSync(join(dataDir, API_PID_FILE), 'utf8').trim());
  } catch {
    return;
  }
  const isApi = () => {
    try {
      return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('api-process.js');
    } catch {
      return false;
    }
  };
  if (!Number.isInteger(pid) || pid <= 1 || !isApi()) return;
  process.kill(pid, 'SIGKILL');
  for (let i = 0; i < 100 && isApi(); i++) await new Promise((r) => setTimeout(r, 50));
}

/**
 * The VMs' driver and their network, started once for the API's first process: the gateway's
 * questions go to whichever API process runs, and VMs that end unasked are reported to it.
 */
async function startHost(config: Config, fleet: FleetKeySettings | null, prepared: PreparedHost, egressCa: { certPem: string; keyPem: string } | null, api: ChildPart, log: pino.Logger): Promise<HostParts> {
  const ca = egressCa !== null ? await CertificateAuthority.fromPem(egressCa.certPem, egressCa.keyPem) : await CertificateAuthority.loadOrCreate(config.dataDir);
  // Its VMs' cgroups and its gateway's TAPs and nftables table are named after the data directory.
  const instance = instanceIdOf(config.dataDir);
  const detected = VmCgroups.detect(instance);
  if (detected.cgroups === null) log.warn({ reason: detected.reason }, 'VMs run without cgroup limits');
  else log.info({ version: detected.cgroups.version }, 'each VM runs in a cgroup of its own');
  const { image, accel, qemuVersion } = prepared;
  const driver = new QemuDriver({ dataDir: config.dataDir, image, accel, qemuVersion, guestCaPem: ca.certPem, memoryOvercommit: config.memoryOvercommit, cgroups: detected.cgroups, logLevel: config.logLevel, log });
  await driver.startAgentProcess();
  // A fleet's host learns each relayed visitor from the entries' signed PROXY headers.
  const node = config.fleet.nodeName;
  const fleetIngress = fleet?.nodeKey === undefined ? undefined : { secret: fleet.nodeKey, node };
  // A single host's ingress hands envd's port to the API's E2B facade (docs/e2b.md); a fleet's VM
  // host serves its API port to API nodes' hops alone.
  const envd = fleet === null ? { host: loopbackOf(config.host), port: config.port, pathPrefix: E2B_ENVD_PREFIX, runtimePort: ENVD_PORT } : undefined;
  const gateway = new Gateway({ instance, ca, ...config.egress, ingress: { ...config.egress.ingress, fleet: fleetIngress, envd }, logLevel: config.logLevel, log });
  await gateway.start();
  gateway.connect(hooksOfApi(api, log));
  driver.onUnexpectedExit((runtimeId) => api.link?.notify('unexpectedExit', { runtimeId }));
  return { driver, gateway, facts: { imageId: driver.imageId(), egressCaPem: ca.certPem, hostLimits: driver.hostLimits(), unavailableReason: driver.unavailableReason() } };
}

/** An address that reaches a listener on `host` from this host: a wildcard address is reached on loopback. */
function loopbackOf(host: string): string {
  if (host === '0.0.0.0') return '127.0.0.1';
  if (host === '::' || host === '[::]') return '::1';
  return host;
}

/**
 * The core's gateway hooks, in the API's process. While it is started again, secrets and ingress
 * wait for it; audits are held here, each with the id and time it was recorded, until the new
 * process has stored them.
 */
function hooksOfApi(api: ChildPart, log: pino.Logger): GatewayHooks {
  const audits = new AcknowledgedNotes<DeliveredAudit>({
    send: async (items) => {
      const link = await api.ready();
      if (link === null) throw new Error('the API process is not running');
      await link.call('audits', items);
    },
    maxBatch: MAX_AUDIT_BATCH,
    maxHeld: MAX_HELD_AUDITS,
    retryMs: AUDIT_RETRY_MS,
    onDropped: (dropped) => log.error({ dropped }, 'egress audits were dropped: more were held than the bound while the API process was away'),
  });
  const live = async (): Promise<PartLink> => {
    const link = await api.ready();
    if (link === null) throw new Error('the API process is not running');
    return link;
  };
  return {
    revealSecret: async (tenantId, secretId) => (await live()).call('revealSecret', { tenantId, secretId }),
    ingressTarget: async (runtimeId, port) => (await live()).call('ingressTarget', { runtimeId, port }),
    audit: (runtimeId, tenantId, kind, detail) => audits.push({ id: randomUUID(), at: new Date().toISOString(), runtimeId, tenantId, kind, detail }),
    activity: (runtimeId) => api.link?.notify('activity', { runtimeId }),
  };
}


function fleetSettings(config: Config, role: Role): FleetKeySettings {
  if (config.databaseUrl === undefined) throw new Error(`--role ${role} needs VESSEL_DATABASE_URL: the API nodes and VM hosts of a fleet share one PostgreSQL`);
  const secret = config.fleet.internalSecret;
  const secretOk = secret !== undefined && secret.length >= MIN_SECRET_CHARS;
  if (role === 'node' && config.fleet.nodeKey !== undefined) return { nodeKey: checkNodeKey(config.fleet.nodeKey), enrolled: true };
  if (!secretOk) {
    const or = role === 'node' ? ' (or VESSEL_NODE_KEY, which `vessel node enroll NAME` prints for this host)' : '';
    throw new Error(`--role ${role} needs VESSEL_INTERNAL_SECRET${or}, the same on every API node of the fleet, of at least ${MIN_SECRET_CHARS} characters`);
  }
  return role === 'node' ? { secret, nodeKey: hostKey(secret, config.fleet.nodeName), enrolled: false } : { secret, enrolled: false };
}
