/**
 * Templates: environments a tenant brings, built in the background into a root disk
 * (docs/templates.md). A create answers at once with the template `building`; the build's log is
 * streamed to whoever asks (build-log.ts); the template ends `ready` or `failed`, with the failing
 * step, its exit code and the end of its output.
 */
import { randomUUID } from 'node:crypto';
import type { Readable } from 'node:stream';
import { BuildLog, utf8Tail, FAILURE_TAIL_BYTES, type BuildEvent } from './build-log.js';
import { VesselError, failedPrecondition, invalidArgument, notFound } from './errors.js';
import { checkDisplayName, checkImageReference } from './names.js';
import type { BuildSource, BuildVms, Store, TemplateBuilder } from './ports.js';
import type { TenantQuotas } from './quotas.js';
import type { Logger } from './runtimes.js';
import type { SecretService } from './secrets.js';
import { NO_COMMAND_DEFAULTS, type CommandDefaults } from './processes.js';
import { normalizeEgressPolicy } from './runtimes.js';
import type { EgressPolicy, Page, PageRequest, ReadyCheck, Template, TemplateConfig, TemplateFailure, TemplateSource } from './types.js';

export interface TemplateCreateInput {
  name: string;
  /** An image reference, as docker pull takes it; absent when an archive is uploaded. */
  image?: string | undefined;
  /** A secret of the tenant's (id or name) whose value is the registry's `username:password`. */
  registry_secret?: string | undefined;
  /** With an uploaded build context: the Dockerfile's path in it. Without, the upload is an image archive. */
  dockerfile?: string | undefined;
  /** The Dockerfile's build args (`--build-arg`). */
  build_args?: Record<string, string> | undefined;
  /** What the build's RUN steps may reach; closed when absent. */
  egress_policy?: EgressPolicy | undefined;
  /** A shell command that exits 0 once the start command (CMD/ENTRYPOINT) is up. */
  ready_cmd?: string | undefined;
  /** A TCP port in the guest that accepts connections once the start command is up. */
  ready_port?: number | undefined;
  /** How long the start command has to become ready. */
  ready_timeout_secs?: number | undefined;
}

/** The build VMs of a Dockerfile build: the tenant's, with the build's egress policy (build-vms.ts). */
export type BuildVmsFactory = (template: Template, egressPolicy: EgressPolicy) => BuildVms;

/** A build's egress unless the create says otherwise: intercepted, and no host allowed (`enabled: false` would let everything through). */
const CLOSED_EGRESS: EgressPolicy = { enabled: true, allowed_hosts: [] };
const MAX_BUILD_ARGS = 64;
/** How long a start command has to become ready unless the create says: a notebook or dev server's first start. */
export const DEFAULT_READY_TIMEOUT_SECS = 300;
/** The longest a create may give it: a RUN's own ceiling. */
export const MAX_READY_TIMEOUT_SECS = 3600;
export const MAX_READY_CMD_BYTES = 16 * 1024;

/** A build step that failed, with its command's exit code when it ran one. */
export class BuildFailure extends Error {
  constructor(
    message: string,
    readonly exitCode: number | null = null,
  ) {
    super(message);
  }
}

export interface TemplateOptions {
  /** The largest archive a create may upload. */
  maxArchiveBytes: number;
  /** Builds running at once in this process; the others wait their turn (each holds ~0.5 GB while it runs). */
  concurrentBuilds: number;
}

export const DEFAULT_TEMPLATE_OPTIONS: TemplateOptions = { maxArchiveBytes: 8 * 1024 ** 3, concurrentBuilds: 1 };

/** Finished builds whose logs this process keeps for readers who come late; older ones answer with their end alone. */
const KEPT_LOGS = 64;

interface RunningBuild {
  log: BuildLog;
  abort: AbortController;
  done: Promise<void>;
}

export class TemplateService {
  readonly #running = new Map<string, RunningBuild>();
  /** Ready templates' configs, read once each (they never change). */
  readonly #configs = new Map<string, TemplateConfig>();
  /** Logs of finished builds, oldest first. */
  readonly #finished = new Map<string, BuildLog>();
  #slotsFree: number;
  readonly #waitingForSlot: Array<() => void> = [];

  constructor(
    private readonly store: Store,
    private readonly secrets: SecretService,
    /** Null where this process builds none (an API node of a fleet). */
    private readonly builder: TemplateBuilder | null,
    private readonly quotas: TenantQuotas,
    private readonly log: Logger,
    /** The VM host this process is in a fleet; null on a single host. Templates are single-host for now. */
    private readonly node: string | null = null,
    private readonly options: TemplateOptions = DEFAULT_TEMPLATE_OPTIONS,
    /** Null where no VMs run (tests of the API alone): Dockerfile builds are refused. */
    private readonly buildVms: BuildVmsFactory | null = null,
  ) {
    this.#slotsFree = options.concurrentBuilds;
  }

  /**
   * Records the template in `building` and starts its build. With `archive`, the upload is taken
   * first (the answer comes once it is all in); without, `input.image` names the image.
   */
  async create(tenantId: string, input: TemplateCreateInput, archive?: Readable): Promise<Template> {
    const name = checkDisplayName(input.name, 'name');
    if (this.node !== null) throw failedPrecondition('templates are built and kept on a single host for now; this service is part of a fleet (docs/templates.md)');
    if (this.builder === null) throw failedPrecondition('this service builds no templates: it has no template builder (docs/templates.md)');
    const builder = this.builder;
    if ((input.image === undefined) === (archive === undefined)) {
      throw invalidArgument('give either image (a reference to pull) or an image archive as the request body, not both');
    }
    if (archive !== undefined && input.registry_secret !== undefined) throw invalidArgument('registry_secret goes with image; an uploaded archive needs none');
    const isContext = input.dockerfile !== undefined;
    const readyGiven = input.ready_cmd !== undefined || input.ready_port !== undefined || input.ready_timeout_secs !== undefined;
    if (!isContext && (input.build_args !== undefined || input.egress_policy !== undefined || readyGiven)) throw invalidArgument('build_args, egress_policy and ready_* go with a Dockerfile build (dockerfile=)');
    if (isContext && archive === undefined) throw invalidArgument('a Dockerfile build needs its build context as the request body (a tar stream)');
    if (isContext && this.buildVms === null) throw failedPrecondition('this service runs no build VMs, so it builds no Dockerfiles');
    const registrySecretId = input.registry_secret === undefined ? null : (await this.secrets.get(tenantId, input.registry_secret)).id;
    let source: TemplateSource;
    if (input.image !== undefined) source = { kind: 'image', image: checkImageReference(input.image, 'image'), registrySecretId };
    else if (isContext) source = { kind: 'dockerfile', contextBytes: 0, dockerfile: checkContextPath(input.dockerfile!), buildArgs: checkBuildArgs(input.build_args ?? {}), egressPolicy: normalizeEgressPolicy(input.egress_policy ?? CLOSED_EGRESS), ready: checkReady(input) };
    else source = { kind: 'archive', archiveBytes: 0 };
    const now = new Date().toISOString();
    const template: Template = {
      id: randomUUID(),
      tenantId,
      displayName: name,
      state: 'building',
      source,
      failure: null,
      config: null,
      diskBytes: null,
      checkpointId: null,
      node: this.node,
      createdAt: now,
      updatedAt: now,
    };
    await this.quotas.admitTemplate(tenantId, () => this.store.templates.insert(template));
    if (archive !== undefined) {
      try {
        const bytes = await builder.receiveArchive(template.id, archive, this.options.maxArchiveBytes);
        template.source = source.kind === 'dockerfile' ? { ...source, contextBytes: bytes } : { kind: 'archive', archiveBytes: bytes };
        await this.store.templates.update(template);
      } catch (err) {
        await builder.discard(template.id).catch(() => undefined);
        await this.store.templates.delete(tenantId, template.id);
        throw err;
      }
    }
    this.#start(template, builder);
    return { ...template };
  }

  async get(tenantId: string, ref: string): Promise<Template> {
    const t = await this.store.templates.find(tenantId, ref);
    if (t === undefined) throw notFound('template', ref);
    return t;
  }

  list = (tenantId: string, page: PageRequest): Promise<Page<Template>> => this.store.templates.list(tenantId, page);

  /**
   * What commands in a runtime from the template default to: its ENV, WORKDIR and USER. A ready
   * template's config never changes, so it is read once.
   */
  async commandDefaults(tenantId: string, templateId: string): Promise<CommandDefaults> {
    let config: TemplateConfig | null = this.#configs.get(templateId) ?? null;
    if (config === null) {
      config = (await this.store.templates.find(tenantId, templateId))?.config ?? null;
      if (config !== null) this.#configs.set(templateId, config);
    }
    return config === null ? NO_COMMAND_DEFAULTS : { env: config.env, cwd: config.workdir, user: config.user };
  }

  /**
   * A build still running is stopped first; its files and log go with it. The disk goes before
   * the record: while runtimes or checkpoints stand on it, the VM host refuses, and the template
   * stays (failed_precondition).
   */
  async delete(tenantId: string, ref: string): Promise<void> {
    const t = await this.get(tenantId, ref);
    const build = this.#running.get(t.id);
    if (build !== undefined) {
      build.abort.abort();
      await build.done;
    }
    if (t.checkpointId !== null) await this.#refuseWhileUsed(t);
    await this.builder?.discard(t.id);
    await this.store.templates.delete(tenantId, t.id);
    this.#finished.delete(t.id);
    this.#configs.delete(t.id);
  }

  /**
   * A Dockerfile's template stands on no disk of its own (the VM host refuses an image template's
   * delete while anything stands on its disk): its runtimes and checkpoints take their exec
   * defaults from it, so it stays while any names it.
   */
  async #refuseWhileUsed(t: Template): Promise<void> {
    const runtimes = (await this.store.runtimes.listAll()).filter((rt) => rt.templateId === t.id).length;
    const checkpoints = (await this.store.checkpoints.listAll()).filter((cp) => cp.templateId === t.id && !cp.deleted).length;
    if (runtimes + checkpoints > 0) throw failedPrecondition(`template '${t.displayName}' is what ${runtimes} runtime(s) and ${checkpoints} checkpoint(s) stand on; delete them first`);
  }

  /**
   * The build's log from its first event, then what comes until its end. A build that this process
   * no longer keeps the log of (an older one, or one from before a restart) answers with its end.
   */
  async buildLog(tenantId: string, ref: string, signal?: AbortSignal): Promise<{ template: Template; events: AsyncIterable<BuildEvent> }> {
    const template = await this.get(tenantId, ref);
    const log = this.#running.get(template.id)?.log ?? this.#finished.get(template.id);
    if (log !== undefined) return { template, events: log.read(signal) };
    if (template.state === 'building') throw failedPrecondition(`template '${template.displayName}' is being built by another process of the service`);
    const end: BuildEvent = { event: 'done', state: template.state, failure: template.failure };
    return { template, events: (async function* () { yield end; })() };
  }

  /** After a restart: a build cut short never ends, so it failed; its files go. Resolves with those templates' ids. */
  async reconcile(): Promise<Set<string>> {
    const cutShort = new Set<string>();
    for (const t of await this.#own()) {
      if (t.state !== 'building' || this.#running.has(t.id)) continue;
      const failure: TemplateFailure = { step: 'build', exitCode: null, outputTail: 'the service restarted during the build' };
      await this.store.templates.update({ ...t, state: 'failed', failure, updatedAt: new Date().toISOString() });
      await this.builder?.discard(t.id).catch((err: unknown) => this.log.warn({ templateId: t.id, err }, 'could not remove a build\'s files'));
      cutShort.add(t.id);
    }
    return cutShort;
  }

  /** Builds still running (tests and shutdown wait on them). */
  settled = (): Promise<unknown> => Promise.allSettled([...this.#running.values()].map((b) => b.done));

  /** Stops every build at its next step; each ends failed. */
  close(): void {
    for (const build of this.#running.values()) build.abort.abort();
  }

  async #own(): Promise<Template[]> {
    return (await this.store.templates.listAll()).filter((t) => t.node === this.node);
  }

  #start(template: Template, builder: TemplateBuilder): void {
    const log = new BuildLog();
    const abort = new AbortController();
    const done = this.#build(template, builder, log, abort.signal)
      .catch((err: unknown) => this.log.error({ templateId: template.id, err }, 'template build crashed'))
      .finally(() => {
        this.#running.delete(template.id);
        this.#finished.set(template.id, log);
        for (const id of this.#finished.keys()) {
          if (this.#finished.size <= KEPT_LOGS) break;
          this.#finished.delete(id);
        }
      });
    this.#running.set(template.id, { log, abort, done });
  }

  async #build(template: Template, builder: TemplateBuilder, log: BuildLog, signal: AbortSignal): Promise<void> {
    const release = await this.#slot(log, signal);
    try {
      if (signal.aborted) throw new BuildFailure('the build was cancelled');
      const built = await builder.build(template.id, await this.#source(template), log, signal);
      if (signal.aborted) throw new BuildFailure('the build was cancelled');
      const ready: Template = { ...template, state: 'ready', config: built.config, diskBytes: built.diskBytes, checkpointId: built.checkpointId ?? null, updatedAt: new Date().toISOString() };
      await this.store.templates.update(ready);
      log.finish('ready', null);
      this.log.info({ templateId: template.id, name: template.displayName }, 'template ready');
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      if (!(err instanceof BuildFailure || err instanceof VesselError)) this.log.error({ templateId: template.id, err }, 'template build failed unexpectedly');
      log.output(`${message}\n`);
      const failure: TemplateFailure = {
        step: log.currentStep ?? 'build',
        exitCode: err instanceof BuildFailure ? err.exitCode : null,
        outputTail: utf8Tail(log.tail, FAILURE_TAIL_BYTES),
      };
      await builder.discard(template.id).catch(() => undefined);
      if (!signal.aborted) {
        await this.store.templates.update({ ...template, state: 'failed', failure, updatedAt: new Date().toISOString() }).catch((e: unknown) => {
          this.log.error({ templateId: template.id, err: e }, 'could not record the failed template');
        });
      }
      log.finish('failed', failure);
    } finally {
      release();
    }
  }

  /** The source with its registry credentials revealed, read when the build starts: never stored elsewhere, never logged. */
  async #source(template: Template): Promise<BuildSource> {
    const source = template.source;
    if (source.kind === 'archive') return { kind: 'archive' };
    if (source.kind === 'dockerfile') {
      if (this.buildVms === null) throw new BuildFailure('this service runs no build VMs');
      const vms = this.buildVms(template, source.egressPolicy);
      const ready = source.ready ?? { command: null, port: null, timeoutSecs: DEFAULT_READY_TIMEOUT_SECS };
      return { kind: 'dockerfile', dockerfile: source.dockerfile, buildArgs: source.buildArgs, vms, ready };
    }
    if (source.registrySecretId === null) return { kind: 'image', image: source.image, credentials: null };
    const secret = await this.store.secrets.find(template.tenantId, source.registrySecretId);
    if (secret === undefined) throw new BuildFailure('the registry secret was deleted before the build began');
    const revealed = await this.secrets.reveal(template.tenantId, secret.id);
    if (revealed === null) throw new BuildFailure('the registry secret was deleted before the build began');
    const value = revealed.value;
    const colon = value.indexOf(':');
    if (colon < 1) throw new BuildFailure(`secret '${secret.displayName}' is not of the form username:password`);
    return { kind: 'image', image: source.image, credentials: { username: value.slice(0, colon), password: value.slice(colon + 1) } };
  }

  /** A build slot; the log says when a build waits for one. Aborted while waiting, it holds none. */
  async #slot(log: BuildLog, signal: AbortSignal): Promise<() => void> {
    let held = true;
    if (this.#slotsFree > 0) this.#slotsFree--;
    else {
      log.step('wait for a build slot');
      await new Promise<void>((resolve) => {
        this.#waitingForSlot.push(resolve);
        signal.addEventListener('abort', () => {
          const i = this.#waitingForSlot.indexOf(resolve);
          if (i < 0) return;
          this.#waitingForSlot.splice(i, 1);
          held = false;
          resolve();
        }, { once: true });
      });
    }
    return () => {
      if (!held) return;
      held = false;
      // The slot passes to the next build waiting, or is free again.
      const next = this.#waitingForSlot.shift();
      if (next !== undefined) next();
      else this.#slotsFree++;
    };
  }
}

/** A Dockerfile's path in its build context: relative, no `..`, bounded. */
function checkContextPath(path: string): string {
  const parts = path.split('/').filter((p) => p !== '' && p !== '.');
  if (parts.length === 0 || parts.includes('..') || path.length > 4096 || path.includes('\0')) throw invalidArgument(`dockerfile '${path.slice(0, 200)}' is not a path inside the build context`);
  return parts.join('/');
}

/** The start command's ready check: a command or a port (not both), and a deadline within bounds. */
function checkReady(input: TemplateCreateInput): ReadyCheck {
  const { ready_cmd: command, ready_port: port, ready_timeout_secs: timeoutSecs = DEFAULT_READY_TIMEOUT_SECS } = input;
  if (command !== undefined && port !== undefined) throw invalidArgument('give ready_cmd or ready_port, not both: a command can check the port too');
  if (command !== undefined && (command.trim() === '' || Buffer.byteLength(command) > MAX_READY_CMD_BYTES || command.includes('\0'))) {
    throw invalidArgument(`ready_cmd must be a shell command of 1 to ${MAX_READY_CMD_BYTES} bytes without NUL`);
  }
  if (port !== undefined && (!Number.isInteger(port) || port < 1 || port > 65535)) throw invalidArgument('ready_port must be a TCP port, 1 to 65535');
  if (!Number.isInteger(timeoutSecs) || timeoutSecs < 1 || timeoutSecs > MAX_READY_TIMEOUT_SECS) throw invalidArgument(`ready_timeout_secs must be a whole number of seconds, 1 to ${MAX_READY_TIMEOUT_SECS}`);
  return { command: command ?? null, port: port ?? null, timeoutSecs };
}

/** Build args as --build-arg takes them: bounded in number and size. */
function checkBuildArgs(args: Record<string, string>): Record<string, string> {
  const entries = Object.entries(args);
  if (entries.length > MAX_BUILD_ARGS) throw invalidArgument(`build_args has ${entries.length} entries; at most ${MAX_BUILD_ARGS} are allowed`);
  const out = Object.create(null) as Record<string, string>;
  for (const [k, v] of entries) {
    if (!/^[A-Za-z_][A-Za-z0-9_]{0,127}$/.test(k)) throw invalidArgument(`build_args key '${k.slice(0, 80)}' is not a variable name`);
    if (typeof v !== 'string' || v.length > 128 * 1024 || v.includes('\0')) throw invalidArgument(`build_args '${k}' must be a string of at most 128 KiB without NUL`);
    out[k] = v;
  }
  return out;
}
