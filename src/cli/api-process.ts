/**
 * The API's process (docs/security.md, "Processes"): the composition root of everything that
 * answers clients (the store, the core, the HTTP API, a fleet member's hop and lease), as the
 * `vessel-api` user with no capabilities. `vessel serve` (serve.ts) starts it, hands it the keys
 * it read, and does for it, over one typed link (src/host), what needs root: QEMU, TAPs and
 * nftables, the VMs' files. A bug in anything that parses a client's request is this user's, and
 * a crash of this process is started again while the VMs and their network run on.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pino from 'pino';
import { buildApi, JSON_BODY_LIMIT } from '../api/app.js';
import type { FleetRole } from '../api/fleet.js';
import { serviceLogOptions } from '../api/log-options.js';
import { apiHopClient, hostCredential } from '../cluster/enrollment.js';
import { HopTls, hostServerOptions, listenTls } from '../cluster/fleet-tls.js';
import { Forwarder } from '../cluster/forwarder.js';
import type { HostHop } from '../cluster/host-hops.js';
import { cutHops } from '../cluster/hop-proxy.js';
import { IngressEntry } from '../cluster/ingress-entry.js';
import { NodeLease, freeDiskBytes } from '../cluster/node-lease.js';
import { noGateway, noVmDriver } from '../cluster/no-vm-host.js';
import { enrolledHostSecrets, unsealRoutes, type SecretOpening } from '../cluster/secret-unsealing.js';
import { vmHostRole } from '../cluster/vm-host-api.js';
import { Core } from '../core/core.js';
import type { DeliveredAudit } from '../core/egress.js';
import { isUuid } from '../core/names.js';
import type { EgressAuditDetail, EgressAuditKind } from '../core/types.js';
import { SecretBox } from '../core/secret-box.js';
import type { HostFacts } from '../host/host-calls.js';
import { RemoteHost } from '../host/remote-host.js';
import { MAX_SLOT } from '../net/addressing.js';
import { MAX_AUDIT_BATCH } from '../net/gateway-requests.js';
import { CertificateAuthority } from '../net/certificate-authority.js';
import type { PartLink } from '../platform/part-link.js';
import { dropPrivileges, runPart } from '../platform/part-process.js';
import { ObjectCheckpointArchive } from '../objects/checkpoint-archive.js';
import { openStore, sqliteDir } from '../store/open-store.js';
import type { Store } from '../core/ports.js';
import { RegistryPolicy } from '../templates/registry-policy.js';
import { ImageTemplateBuilder } from '../templates/template-builder.js';
import { GUEST_RECIPE_DIR } from '../vm/guest-image.js';
import { hostMemoryLimitMib } from '../vm/qemu-driver.js';
import type { ApiPartSettings } from './api-settings.js';
import type { Config } from './config.js';


interface Started {
  core: Core;
  /** An API node's side of the fleet: the forwarder, and the route its hosts' secrets are unsealed by. */
  apiRole?: FleetRole;
  hop?: HostHop;
  beforeListen(): Promise<void>;
  close(): Promise<void>;
}

let shutdown: (() => Promise<void>) | null = null;

runPart(
  () => undefined,
  async (raw, link) => {
    const s = raw as ApiPartSettings;
    // Before the store, a key or a request: from here on this process is no one.
    dropPrivileges(s.user);
    const { config, role } = s;
    const log = pino(serviceLogOptions(config.logLevel));
    // A stray rejection in background work must not take every tenant's API down with it.
    process.on('unhandledRejection', (err) => log.error({ err }, 'unhandled rejection'));
    const secrets: SecretOpening =
      s.fleet?.enrolled === true ? enrolledHostSecrets({ ...config.fleet, masterKey: config.masterKey }, s.fleet.nodeKey!, log) : { box: new SecretBox(Buffer.from(s.masterKey!, 'base64')), unsealer: null };
    const started = role === 'api' ? await startApiNode(config, s.fleet!.secret!, secrets.box!, log) : await startVmHost(s, secrets, log, link);
    const { core } = started;
    // A VM host takes no bearer token but an admin's for /metrics, and writes no token: its
    // database role may not (docs/scaling.md, "The VM hosts' database role").
    if (role !== 'node') await core.tokens.installAdmin(s.adminToken);
    await started.beforeListen();

    const app = await buildApi({
      core,
      logger: log,
      rateLimit: config.rateLimit,
      unauthenticatedRateLimit: config.unauthenticatedRateLimit,
      trustedProxies: config.trustedProxies,
      maxFileBytes: config.maxFileBytes,
      listenHost: config.host,
      ingress: config.egress.ingress.publicAddress,
      fleet: started.hop !== undefined ? vmHostRole(core, started.hop) : started.apiRole,
    });
    // A VM host serves the hop (with /healthz and /metrics) on its internal port alone; over TLS
    // alone once it is enrolled.
    const hopTls = started.hop?.tls;
    const stopTls = hopTls == null ? null : await app.ready().then(() => listenTls(app.server, hostServerOptions(hopTls.identity), config.host, config.fleet.internalPort));
    if (stopTls === null) await app.listen({ host: config.host, port: role === 'node' ? config.fleet.internalPort : config.port });
    shutdown = async () => {
      // Streams through this API node would hold app.close() for as long as they run.
      cutHops();
      await stopTls?.();
      await app.close();
      await started.close();
      await core.close();
    };
  },
  () => shutdown?.(),
);

/** How often a fleet member reads the hosts while nothing asks: often enough to see an outage of the store that could let a lease run out. */
const watchNodesMs = (config: Config): number => (config.fleet.leaseSecs * 1000) / 5;

/** An API node: the store, the core over it with no VMs, the forwarder and the ingress entry. */
async function startApiNode(config: Config, secret: string, secretBox: SecretBox, log: pino.Logger): Promise<Started> {
  const store = await openStore(config, { onIdleError: (err) => log.warn({ err }, 'a database connection failed; it is replaced') });
  const core = new Core({ store, driver: noVmDriver(), gateway: noGateway(), secretBox, log, tenantLimits: config.tenantLimits, nodeLeaseSecs: config.fleet.leaseSecs });
  core.nodes.watch(watchNodesMs(config));
  const client = await apiHopClient(store.nodes, secret, secretBox);
  const entry = new IngressEntry({
    store,
    nodes: core.nodes,
    domain: config.egress.ingress.domain,
    keys: client.keys,
    fleetCa: fleetCaPem(store, secretBox),
    trustedProxies: config.trustedProxies,
    log,
  });
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

/**
 * The fleet CA's certificate, read from the store when first asked (the first host to start
 * proposes the CA; an API node that asks first proposes it the same way); asked again after a
 * failure.
 */
function fleetCaPem(store: Store, box: SecretBox): () => Promise<string> {
  let pem: Promise<string> | null = null;
  return () => {
    pem ??= CertificateAuthority.shared((proposed) => store.nodes.shared('egress-ca', proposed), box).then(
      (ca) => ca.certPem,
      (err: unknown) => {
        pem = null;
        throw err;
      },
    );
    return pem;
  };
}

/** A single host (`all`) or a fleet's VM host (`node`): its VMs through the host process, and for a node its lease. */
async function startVmHost({ config, role, fleet, hostId, guestAgent }: ApiPartSettings, secrets: SecretOpening, log: pino.Logger, link: PartLink): Promise<Started> {
  const store = await openStore(config, { onIdleError: (err) => log.warn({ err }, 'a database connection failed; it is replaced') });
  const node = role === 'node' ? config.fleet.nodeName : null;
  const secret = fleet?.nodeKey;
  const credential = node !== null && secret !== undefined && fleet?.enrolled === true ? await hostCredential(store.nodes, node, secret) : null;
  if (node !== null && credential === null) log.warn({ node }, 'this VM host holds the fleet secret and serves the hop without TLS: enroll it (vessel node enroll) and give it VESSEL_NODE_KEY instead');
  // A fleet's hosts share one CA, from the store: a checkpoint's guest trusts it on whichever host
  // its files move to. A single host keeps its own, which the host process reads from its files.
  const fleetCa = credential !== null ? await credential.egressCa : role === 'node' ? await CertificateAuthority.shared((proposed) => store.nodes.shared('egress-ca', proposed), secrets.box!) : null;
  const facts = await link.call<HostFacts>('startHost', { egressCa: fleetCa === null ? null : fleetCa.pems() });
  const host = new RemoteHost(link, facts);
  // Templates are built here, as this process's user, and kept by the host (docs/templates.md); single-host for now.
  const templateBuilder = role === 'all' && guestAgent !== null ? imageTemplateBuilder(config, guestAgent, host) : null;
  const archive = config.objectStore === null ? null : new ObjectCheckpointArchive(config.objectStore);
  if (archive !== null) {
    // A bucket an operator made is used as it is; a fresh server's is made. Not reachable now is not fatal: uploads retry.
    await archive.chunks.ensureBucket().catch((err: unknown) => log.warn({ bucket: archive.chunks.bucket, err: (err as Error).message }, 'the object storage bucket could not be checked; checkpoint uploads will retry'));
  }
  const core = new Core({ store, driver: host, gateway: host, secretBox: secrets.box, unsealer: secrets.unsealer, log, tenantLimits: config.tenantLimits, warmPoolSize: config.warmPoolSize, node, templateBuilder, nodeLeaseSecs: config.fleet.leaseSecs, archive });
  if (fleet !== null) core.nodes.watch(watchNodesMs(config));
  answerGateway(link, core);
  const { advertiseHost, internalPort, leaseSecs } = config.fleet;
  const lease =
    node === null || secret === undefined || hostId === null
      ? null
      : new NodeLease(store.nodes, {
          name: node,
          holder: hostId,
          onTaken: (err) => {
            // Another host acts for this name now: this one serving on would be two hosts at once.
            log.fatal({ err: err.message }, 'this VM host lost its name to another host; it stops (its VMs keep running)');
            process.exit(1);
          },
          internalUrl: `${credential === null ? 'http' : 'https'}://${advertiseHost}:${internalPort}`,
          ingressAddress: `${advertiseHost}:${config.egress.ingress.port}`,
          leaseSecs,
          capacity: () => ({ ...facts.hostLimits, memoryMib: hostMemoryLimitMib() * config.memoryOvercommit, runtimes: MAX_SLOT, diskBytes: freeDiskBytes(config.dataDir) }),
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
      archive?.close();
    },
  };
}

/** Builds in the API's own directory (DATA_DIR/store, this user's), with a guest kit of this host's binaries. */
function imageTemplateBuilder(config: Config, guestAgent: string, host: RemoteHost): ImageTemplateBuilder {
  return new ImageTemplateBuilder({
    dir: join(sqliteDir(config.dataDir), 'template-builds'),
    kit: {
      busybox: existsSync('/usr/bin/busybox') ? '/usr/bin/busybox' : '/bin/busybox',
      tini: '/usr/bin/tini-static',
      agent: guestAgent,
      vesselInit: readFileSync(join(GUEST_RECIPE_DIR, 'vessel-init'), 'utf8'),
      caPem: host.egressCaPem(),
    },
    registries: new RegistryPolicy(config.templateRegistriesAllowed),
    disks: host,
  });
}

/**
 * What the gateway asks of the core, relayed by the host process: it checked each request of its
 * listeners against the runtimes it serves (src/net/gateway-requests.ts) before it sent it on.
 */
function answerGateway(link: PartLink, core: Core): void {
  const hooks = core.egress;
  const str = (v: unknown): string => {
    if (typeof v !== 'string') throw new Error('expected a string');
    return v;
  };
  const argsOf = (a: unknown): Record<string, unknown> => (typeof a === 'object' && a !== null ? (a as Record<string, unknown>) : {});
  link.handle('revealSecret', (a) => hooks.revealSecret(str(argsOf(a).tenantId), str(argsOf(a).secretId)));
  link.handle('ingressTarget', (a) => {
    const port = argsOf(a).port;
    if (typeof port !== 'number') throw new Error('expected a port');
    return hooks.ingressTarget(str(argsOf(a).runtimeId), port);
  });
  // Answered once the store holds the batch: root keeps what is not answered for and sends it again.
  link.handle('audits', async (batch) => {
    if (!Array.isArray(batch) || batch.length > MAX_AUDIT_BATCH) throw new Error(`expected an array of at most ${MAX_AUDIT_BATCH} audits`);
    const delivered = batch.map((a): DeliveredAudit => {
      const { id, at, runtimeId, tenantId, kind, detail } = argsOf(a);
      if (!isUuid(str(id)) || Number.isNaN(Date.parse(str(at)))) throw new Error('expected an audit with a UUID and an ISO 8601 time');
      return { id: str(id), at: str(at), runtimeId: str(runtimeId), tenantId: str(tenantId), kind: str(kind) as EgressAuditKind, detail: detail as EgressAuditDetail };
    });
    await core.egress.storeAudits(delivered);
    return null;
  });
  link.handle('activity', (a) => {
    hooks.activity(str(argsOf(a).runtimeId));
    return null;
  });
}
