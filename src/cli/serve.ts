/**
 * The composition root: the one place that wires the real adapters (SQLite store, QEMU driver,
 * network gateway) into the core and puts the HTTP facade in front of it.
 */
import { createHash } from 'node:crypto';
import { join } from 'node:path';
import pino from 'pino';
import type { FleetRole } from '../api/fleet.js';
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
import { QemuDriver, hostMemoryLimitMib } from '../vm/qemu-driver.js';
import { JSON_BODY_LIMIT } from '../api/app.js';
import { Forwarder } from '../cluster/forwarder.js';
import { cutHops } from '../cluster/hop-proxy.js';
import { MIN_SECRET_CHARS } from '../cluster/hop.js';
import { apiHopClient, hostCredential } from '../cluster/enrollment.js';
import { checkNodeKey, hostKey } from '../cluster/fleet-keys.js';
import { HopTls, hostServerOptions, listenTls } from '../cluster/fleet-tls.js';
import type { HostHop } from '../cluster/host-hops.js';
import { IngressEntry } from '../cluster/ingress-entry.js';
import { NodeLease, freeDiskBytes, hostIdentity } from '../cluster/node-lease.js';
import { noGateway, noVmDriver } from '../cluster/no-vm-host.js';
import { enrolledHostSecrets, unsealRoutes, type SecretOpening } from '../cluster/secret-unsealing.js';
import { vmHostRole } from '../cluster/vm-host-api.js';
import { MAX_SLOT } from '../net/addressing.js';
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

/** `all`: today's single host; `api` and `node`: the two halves of a fleet (docs/scaling.md). */
export const ROLES = ['all', 'api', 'node'] as const;
export type Role = (typeof ROLES)[number];

export async function serve(config: Config, role: Role = 'all'): Promise<void> {
  const log = pino(serviceLogOptions(config.logLevel));
  // A stray rejection in background work must not take every tenant's API down with it.
  process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
  const fleet = role === 'all' ? undefined : fleetSettings(config, role);
  ensureDataDir(config.dataDir);
  // An API node keeps nothing in its data directory that another process could share by mistake.
  const unlock = role === 'api' ? () => undefined : lockDataDir(config.dataDir);
  // Before anything slow: a key or token file that others can read is refused at once. An
  // enrolled VM host holds no master key: API nodes unseal its secrets (docs/scaling.md).
  const secrets: SecretOpening =
    fleet?.enrolled === true ? enrolledHostSecrets({ ...config.fleet, masterKey: config.masterKey }, fleet.nodeKey!, log) : { box: new SecretBox(loadMasterKey(config.dataDir, config.masterKey)), unsealer: null };
  const admin = loadAdminToken(config.dataDir, config.adminToken);
  const ingress = { domain: config.egress.ingress.domain, port: config.egress.ingress.port };
  const apiOptions = {
    logger: log,
    rateLimit: config.rateLimit,
    unauthenticatedRateLimit: config.unauthenticatedRateLimit,
    trustedProxies: config.trustedProxies,
    maxFileBytes: config.maxFileBytes,
    listenHost: config.host,
    ingress,
  };
  const started = role === 'api' ? await startApiNode(config, fleet!.secret!, secrets.box!, log) : await startVmHost(config, role, fleet, secrets, log);
  const { core } = started;

  // A VM host takes no bearer token but an admin's for /metrics, and writes no token: its
  // database role may not (docs/scaling.md, "The VM hosts' database role").
  if (role !== 'node') await core.tokens.installAdmin(admin.token);
  if (admin.created && role !== 'node') {
    // Printed once, to the terminal only; the file keeps it for the operator.
    process.stderr.write(`\nAdmin token (also in ${join(config.dataDir, 'admin-token')}):\n  ${admin.token}\n\n`);
  }
  await started.beforeListen();

  const app = await buildApi({ core, ...apiOptions, fleet: started.hop !== undefined ? vmHostRole(core, started.hop) : started.apiRole });
  // A VM host serves the hop (with /healthz and /metrics) on its internal port alone; over TLS
  // alone once it is enrolled.
  const hopTls = started.hop?.tls;
  const stopTls = hopTls == null ? null : await app.ready().then(() => listenTls(app.server, hostServerOptions(hopTls.identity), config.host, config.fleet.internalPort));
  if (stopTls === null) await app.listen({ host: config.host, port: role === 'node' ? config.fleet.internalPort : config.port });

  let closing = false;
  const shutdown = async (signal: string) => {
    if (closing) return;
    closing = true;
    log.info({ signal }, role === 'api' ? 'shutting down' : 'shutting down; VMs keep running');
    // Streams through this API node would hold app.close() for as long as they run.
    cutHops();
    await stopTls?.();
    await app.close();
    await started.close();
    await core.close();
    unlock();
    process.exit(0);
  };
  process.once('SIGTERM', () => void shutdown('SIGTERM'));
  process.once('SIGINT', () => void shutdown('SIGINT'));
}

interface Started {
  core: Core;
  /** An API node's side of the fleet: the forwarder, and the route its hosts' secrets are unsealed by. */
  apiRole?: FleetRole;
  /** A VM host's side of the hop: its key and name, and its certificate once enrolled. */
  hop?: HostHop;
  /** What runs once the admin token is in and before the API listens. */
  beforeListen(): Promise<void>;
  /** What stops before the core closes. */
  close(): Promise<void>;
}

/**
 * What a fleet member needs: the shared PostgreSQL, and its keys. An API node holds the fleet
 * secret. A VM host holds its own key (VESSEL_NODE_KEY, from `vessel node enroll`), or, not
 * enrolled, the fleet secret it derives its key from (and then serves the hop without TLS).
 */
interface FleetKeySettings {
  secret?: string;
  /** This VM host's own key. */
  nodeKey?: string;
  /** Whether the host is enrolled (given its own key): TLS, and none of the fleet secret. */
  enrolled: boolean;
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

/** An API node: the store, the core over it with no VMs, the forwarder and the ingress entry. */
async function startApiNode(config: Config, secret: string, secretBox: SecretBox, log: pino.Logger): Promise<Started> {
  const store = await openStore(config, { onIdleError: (err) => log.warn({ err }, 'a database connection failed; it is replaced') });
  const core = new Core({ store, driver: noVmDriver(), gateway: noGateway(), secretBox, log, tenantLimits: config.tenantLimits });
  const client = await apiHopClient(store.nodes, secret, secretBox);
  const entry = new IngressEntry(store, core.nodes, config.egress.ingress.domain, client.keys, log);
  return {
    core,
    apiRole: { ...new Forwarder(store, core.nodes, client, JSON_BODY_LIMIT).role(), routes: unsealRoutes(core, client.keys) },
    beforeListen: () => entry.listen(config.egress.ingress.host, config.egress.ingress.port),
    close: async () => {
      await entry.close();
      client.close();
    },
  };
}

/** A single host (`all`) or a fleet's VM host (`node`): VMs, their network, and for a node its lease. */
async function startVmHost(config: Config, role: Role, fleet: FleetKeySettings | undefined, secrets: SecretOpening, log: pino.Logger): Promise<Started> {
  const { image, accel, qemuVersion } = await prepareHost(config, log);
  const store = await openStore(config, { onIdleError: (err) => log.warn({ err }, 'a database connection failed; it is replaced') });
  const node = role === 'node' ? config.fleet.nodeName : null;
  const secret = fleet?.nodeKey;
  const credential = node !== null && secret !== undefined && fleet?.enrolled === true ? await hostCredential(store.nodes, node, secret) : null;
  if (node !== null && credential === null) log.warn({ node }, 'this VM host holds the fleet secret and serves the hop without TLS: enroll it (vessel node enroll) and give it VESSEL_NODE_KEY instead');
  // A fleet's hosts share one CA: a checkpoint's guest trusts it on whichever host its files move to.
  const ca =
    credential !== null ? await credential.egressCa : role === 'node' ? await CertificateAuthority.shared((proposed) => store.nodes.shared('egress-ca', proposed), secrets.box!) : await CertificateAuthority.loadOrCreate(config.dataDir);
  // Its VMs' cgroups and its gateway's TAPs and nftables table are named after the data directory.
  const instance = createHash('sha256').update(config.dataDir).digest('hex').slice(0, 8);
  const detected = VmCgroups.detect(instance);
  if (detected.cgroups === null) log.warn({ reason: detected.reason }, 'VMs run without cgroup limits');
  else log.info({ version: detected.cgroups.version }, 'each VM runs in a cgroup of its own');
  const driver = new QemuDriver({ dataDir: config.dataDir, image, accel, qemuVersion, guestCaPem: ca.certPem, memoryOvercommit: config.memoryOvercommit, cgroups: detected.cgroups, logLevel: config.logLevel, log });
  await driver.startAgentProcess();
  // A fleet's host learns each relayed visitor from the entries' signed PROXY headers.
  const fleetIngress = node === null || secret === undefined ? undefined : { secret, node };
  const gateway = new Gateway({ instance, ca, ...config.egress, ingress: { ...config.egress.ingress, fleet: fleetIngress }, logLevel: config.logLevel, log });
  await gateway.start();
  const core = new Core({ store, driver, gateway, secretBox: secrets.box, unsealer: secrets.unsealer, log, tenantLimits: config.tenantLimits, warmPoolSize: config.warmPoolSize, node });
  gateway.connect(core.egress);
  const { advertiseHost, internalPort, leaseSecs } = config.fleet;
  const lease =
    node === null || secret === undefined
      ? null
      : new NodeLease(store.nodes, {
          name: node,
          holder: hostIdentity(config.dataDir),
          onTaken: (err) => {
            // Another host acts for this name now: this one serving on would be two hosts at once.
            log.fatal({ err: err.message }, 'this VM host lost its name to another host; it stops (its VMs keep running)');
            process.exit(1);
          },
          internalUrl: `${credential === null ? 'http' : 'https'}://${advertiseHost}:${internalPort}`,
          ingressAddress: `${advertiseHost}:${config.egress.ingress.port}`,
          leaseSecs,
          capacity: () => ({ ...driver.hostLimits(), memoryMib: hostMemoryLimitMib() * config.memoryOvercommit, runtimes: MAX_SLOT, diskBytes: freeDiskBytes(config.dataDir) }),
        }, log);
  const hop = node === null || secret === undefined ? undefined : { secret, node, tls: credential === null ? null : new HopTls(credential.tls) };
  return {
    core,
    hop,
    beforeListen: async () => {
      const reconciled = await core.reconcile();
      log.info(reconciled, 'reconciled runtimes with live VMs');
      core.runtimes.startLifecycleTimers(config.idleSuspendSecs);
      // Registered once its VMs are adopted: API nodes send it nothing before.
      await lease?.start();
    },
    close: async () => {
      await lease?.stop();
      hop?.tls?.close();
    },
  };
}
