/** The core's one public entry: the services, wired over the ports they need. */
import { AuditService } from './audits.js';
import { CheckpointUploads } from './checkpoint-uploads.js';
import { CheckpointService } from './checkpoints.js';
import { ConsoleLogService } from './console-log.js';
import { EgressService } from './egress.js';
import { FileService } from './files.js';
import { NO_COMMAND_DEFAULTS, ProcessService } from './processes.js';
import type { CheckpointArchive, NetworkGateway, SecretUnsealer, Store, TemplateBuilder, VmDriver } from './ports.js';
import { TenantQuotas } from './quotas.js';
import { RuleService } from './rules.js';
import { RuntimeMoves } from './runtime-moves.js';
import { RuntimeService, type Logger } from './runtimes.js';
import type { SecretBox } from './secret-box.js';
import { SecretService } from './secrets.js';
import { NodeDirectory } from './node-directory.js';
import { ShownRuntimes } from './shown-runtimes.js';
import { TemplateService, type TemplateOptions } from './templates.js';
import { BUILD_LABEL, TenantBuildVms } from './build-vms.js';
import { TokenService } from './tokens.js';
import type { TenantLimits } from './types.js';
import { WarmPool } from './warm-pool.js';

export interface CorePorts {
  store: Store;
  driver: VmDriver;
  gateway: NetworkGateway;
  /** The master key's box; null in a process that holds none (an enrolled VM host), which is given `unsealer`. */
  secretBox: SecretBox | null;
  /** Where a VM host without the master key has secrets opened for its gateway: an API node. */
  unsealer?: SecretUnsealer | null;
  log: Logger;
  /** What each tenant may hold unless an operator set limits of its own (docs/api.md, "Quotas"). */
  tenantLimits: TenantLimits;
  /** Spare VMs kept ready for creates without a checkpoint (0 or absent: none). */
  warmPoolSize?: number;
  /** A fleet's VM hosts' lease: no host is taken for lost until the store answered again for this long after an outage. */
  nodeLeaseSecs?: number;
  /** Object storage for checkpoints (docs/scaling.md, "Object storage"); absent: their files stay on their host alone. */
  archive?: CheckpointArchive | null;
  /** The VM host this process is in a fleet (`--role node`); absent on a single host. */
  node?: string | null;
  /** What builds templates' root disks; absent where this process builds none (an API node of a fleet). */
  templateBuilder?: TemplateBuilder | null;
  templates?: TemplateOptions;
}

export class Core {
  readonly tokens: TokenService;
  readonly runtimes: RuntimeService;
  /** Streamed commands, background processes and terminals in running runtimes. */
  readonly processes: ProcessService;
  /** Files, directories and archives in running runtimes. */
  readonly files: FileService;
  readonly secrets: SecretService;
  readonly rules: RuleService;
  readonly checkpoints: CheckpointService;
  /** Templates and their builds. */
  readonly templates: TemplateService;
  readonly audits: AuditService;
  /** What runtimes' guests wrote to their serial consoles. */
  readonly consoleLogs: ConsoleLogService;
  /** What the gateway calls back: secret values, audits, activity. */
  readonly egress: EgressService;
  /** A fleet's VM hosts, read from the store at most once a second. */
  readonly nodes: NodeDirectory;
  /** Runtimes as shown: `unavailable` where their VM host lost its lease. */
  readonly shown: ShownRuntimes;
  /** Moves of runtimes between VM hosts; null on a single host. */
  readonly runtimeMoves: RuntimeMoves | null;
  readonly #pool: WarmPool;
  /** Uploads of ready checkpoints to object storage; null without one. */
  readonly #uploads: CheckpointUploads | null;
  /** The upload pass under way (tests wait on it). */
  uploadsSettled = (): Promise<void> => this.#uploads?.settled() ?? Promise.resolve();
  /** The background check of every checkpoint's files after a start. */
  #verifying: Promise<void> = Promise.resolve();

  constructor(private readonly ports: CorePorts) {
    const { store, driver, gateway, secretBox, log } = ports;
    const node = ports.node ?? null;
    const unsealer = ports.unsealer ?? null;
    if (secretBox === null && unsealer === null) throw new Error('the core needs the master key, or an unsealer to ask for secrets');
    this.tokens = new TokenService(store);
    this.secrets = new SecretService(store, secretBox);
    this.audits = new AuditService(store);
    this.egress = new EgressService(store, gateway, this.secrets, this.audits, (id) => this.runtimes.touch(id), log, node, unsealer);
    this.#pool = new WarmPool(driver, gateway, ports.warmPoolSize ?? 0, log);
    const quotas = new TenantQuotas(store, ports.tenantLimits, async (tenantId) => {
      const [runtimes, checkpoints] = await Promise.all([store.runtimes.listAll(), store.checkpoints.listAll()]);
      return driver.orphanedLayerBytes(
        runtimes.filter((rt) => rt.tenantId === tenantId).map((rt) => rt.id),
        checkpoints.filter((cp) => cp.tenantId === tenantId && !cp.deleted).map((cp) => cp.id),
      );
    });
    this.runtimes = new RuntimeService(store, driver, this.egress, quotas, this.audits, log, this.#pool, node);
    this.processes = new ProcessService(this.runtimes, driver, (rt) => (rt.templateId === null ? Promise.resolve(NO_COMMAND_DEFAULTS) : this.templates.commandDefaults(rt.tenantId, rt.templateId)));
    this.files = new FileService(this.runtimes, driver);
    this.consoleLogs = new ConsoleLogService(this.runtimes, driver);
    this.rules = new RuleService(store, this.runtimes, this.secrets);
    const archive = ports.archive ?? null;
    this.#uploads = archive === null ? null : new CheckpointUploads(store, driver, archive, log, node);
    this.checkpoints = new CheckpointService(store, this.runtimes, driver, quotas, log, node, archive === null ? null : { files: archive, uploads: this.#uploads! });
    const buildServices = { store, runtimes: this.runtimes, processes: this.processes, files: this.files, checkpoints: this.checkpoints, imageId: () => driver.imageId() };
    this.templates = new TemplateService(store, this.secrets, ports.templateBuilder ?? null, quotas, log, node, ports.templates, (template, policy) => new TenantBuildVms(buildServices, template, policy));
    this.runtimeMoves = node === null ? null : new RuntimeMoves(store, this.runtimes, driver, this.egress, this.audits, log, node);
    // A PATCHed policy or a rule change applies to the gateway's next connection.
    this.runtimes.observe({ policyChanged: (rt) => this.egress.refresh(rt.id) });
    this.rules.onChange((runtimeId) => this.egress.refresh(runtimeId));
    this.runtimes.useCheckpoints(this.checkpoints);
    this.nodes = new NodeDirectory(store.nodes, { leaseMs: (ports.nodeLeaseSecs ?? 0) * 1000 });
    this.shown = new ShownRuntimes(this.nodes);
  }

  /** Brings the store in line with reality after a (possibly unclean) restart. */
  async reconcile(): Promise<{ adopted: number; crashed: number; orphans: number }> {
    const result = await this.runtimes.reconcile();
    await this.checkpoints.reconcile();
    const cutShort = await this.templates.reconcile();
    // The build VMs of builds cut short by the restart: nothing will ever use or remove them.
    for (const rt of await this.ports.store.runtimes.listAll()) {
      if (!cutShort.has(rt.labels[BUILD_LABEL] ?? '')) continue;
      await this.runtimes.delete(rt.tenantId, rt.id).catch((err: unknown) => this.ports.log.warn({ runtimeId: rt.id, err }, 'could not remove the build VM of a build cut short'));
    }
    await this.egress.restore();
    // What a previous run left to upload (or never started) goes now, in the background.
    this.#uploads?.kick();
    this.#verifying = this.checkpoints.verifyAll().catch((err: unknown) => this.ports.log.error({ err }, 'checkpoint verification failed'));
    return result;
  }

  async close(): Promise<void> {
    this.runtimes.stopLifecycleTimers();
    this.nodes.close();
    await this.#pool.close();
    this.checkpoints.close();
    this.#uploads?.close();
    this.templates.close();
    await this.templates.settled();
    await this.#verifying;
    // An upload under way is not waited for: cut, it resumes at the next start, and the chunks it
    // sent are not sent again.
    await this.checkpoints.settled();
    await this.egress.flush();
    await this.ports.gateway.close();
    await this.ports.driver.close();
    await this.ports.store.close();
  }
}
