/**
 * The build VMs of Dockerfile builds (docs/templates.md, "Dockerfile builds"). A build VM is a
 * runtime of the template's tenant, made and used through the same services as any other: so its
 * egress goes through the gateway under the build's policy and is audited, its memory counts
 * against the tenant's quota, and its steps run through the guest agent, never on the host. Each
 * sealed step is a checkpoint of the tenant's, named by its cache key, which later builds fork
 * to continue where it ended.
 */
import { randomBytes } from 'node:crypto';
import type { Readable } from 'node:stream';
import type { CheckpointService } from './checkpoints.js';
import { VesselError, failedPrecondition } from './errors.js';
import type { FileService } from './files.js';
import type { BuildVm, BuildVmBase, BuildVms, Store } from './ports.js';
import type { ProcessService } from './processes.js';
import type { RuntimeService } from './runtimes.js';
import type { EgressPolicy, Template, TemplateConfig } from './types.js';

/** A RUN is stopped after this long: the exec API's own ceiling would cut real builds (apt, compilers) short. */
const RUN_TIMEOUT_SECS = 3600;
/** What one COPY may send into the build VM: the largest build context. */
const MAX_ARCHIVE_BYTES = 1024 ** 3;
/** What the guest keeps of a start command's output per channel: enough for a failure's tail, little in every fork. */
const START_RING_BYTES = 64 * 1024;

/** The checkpoint that holds the layer under a cache key: its name, unique within the tenant. */
/** The label that marks a build VM, its value the template's id: a restart removes those of builds cut short. */
export const BUILD_LABEL = 'vessel.build';

export const layerCheckpointName = (key: string): string => `build-layer-${key.replace(/^sha256:/, '').slice(0, 48)}`;

export interface BuildVmServices {
  store: Store;
  runtimes: RuntimeService;
  processes: ProcessService;
  files: FileService;
  checkpoints: CheckpointService;
  imageId: () => string;
}

/** The build VMs of one build: the tenant's, named after the template, with the build's egress policy. */
export class TenantBuildVms implements BuildVms {
  constructor(
    private readonly services: BuildVmServices,
    private readonly building: Template,
    private readonly egressPolicy: EgressPolicy,
  ) {}

  get tenantId(): string {
    return this.building.tenantId;
  }

  defaultImageId(): string {
    return this.services.imageId();
  }

  async template(ref: string): Promise<{ id: string; config: TemplateConfig }> {
    const t = await this.services.store.templates.find(this.tenantId, ref);
    if (t === undefined) throw failedPrecondition(`FROM ${ref}: no template of yours has this name, and images from registries are built with POST /v1/templates {image} first`);
    if (t.state !== 'ready' || t.config === null) throw failedPrecondition(`FROM ${ref}: template '${t.displayName}' is ${t.state}, not ready`);
    return { id: t.id, config: t.config };
  }

  async findLayer(key: string): Promise<string | null> {
    const cp = await this.services.store.checkpoints.find(this.tenantId, layerCheckpointName(key));
    return cp?.state === 'ready' && !cp.deleted ? cp.id : null;
  }

  async start(base: BuildVmBase): Promise<BuildVm> {
    const name = `build-${this.building.displayName.slice(0, 100)}-${randomBytes(4).toString('hex')}`;
    const rt = await this.services.runtimes.create(this.tenantId, {
      display_name: name,
      egress_policy: this.egressPolicy,
      ...(base.kind === 'layer' ? { checkpoint: base.checkpointId } : base.kind === 'template' ? { template: base.templateId } : {}),
      labels: { [BUILD_LABEL]: this.building.id },
    });
    return new TenantBuildVm(this.services, this.tenantId, rt.id);
  }
}

class TenantBuildVm implements BuildVm {
  #gone = false;

  constructor(
    private readonly services: BuildVmServices,
    private readonly tenantId: string,
    private readonly runtimeId: string,
  ) {}

  async run(argv: string[], env: Record<string, string>, cwd: string, user: string, onOutput: (text: string) => void, signal: AbortSignal): Promise<number> {
    const [command, ...args] = argv;
    if (command === undefined) throw failedPrecondition('a RUN with an empty command');
    // An exec of one word with no args is the shell form; `sh -c word` runs the same program.
    const session = await this.services.processes.execStream(this.tenantId, this.runtimeId, {
      command, args, cwd, env, user, stdin: null, maxOutputBytes: 0, timeoutSecs: RUN_TIMEOUT_SECS, background: false,
    });
    // A build stopped (its template deleted, the service closing) kills the command's tree.
    const stop = () => session.abandon();
    signal.addEventListener('abort', stop, { once: true });
    try {
      const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
      for await (const chunk of session.output) {
        const decoder = chunk.channel === 'stderr' ? decoders.stderr : decoders.stdout;
        onOutput(decoder.decode(chunk.data, { stream: true }));
      }
      return (await session.result()).exit_code;
    } finally {
      signal.removeEventListener('abort', stop);
      session.abandon();
    }
  }

  async startProcess(argv: string[], env: Record<string, string>, cwd: string, user: string): Promise<number> {
    const [command, ...args] = argv;
    if (command === undefined) throw failedPrecondition('an empty start command');
    const state = await this.services.processes.start(this.tenantId, this.runtimeId, {
      command, args, cwd, env, user, pty: null, stdin: false, ringBytes: START_RING_BYTES,
    });
    return state.id;
  }

  async exitCodeOf(processId: number): Promise<number | null> {
    const state = await this.services.processes.get(this.tenantId, this.runtimeId, processId);
    if (state.status === 'running') return null;
    return state.status === 'signaled' ? 128 + (state.signal ?? 0) : (state.exitCode ?? 0);
  }

  async outputTail(processId: number, maxBytes: number): Promise<string> {
    const attachment = await this.services.processes.output(this.tenantId, this.runtimeId, processId, 'oldest', false);
    let tail = Buffer.alloc(0);
    try {
      for await (const chunk of attachment.stream) {
        tail = Buffer.concat([tail, chunk.data]);
        if (tail.length > maxBytes) tail = tail.subarray(tail.length - maxBytes);
      }
    } finally {
      attachment.close();
    }
    return tail.toString('utf8');
  }

  async readFile(path: string, maxBytes: number): Promise<Buffer | null> {
    let stream: Readable;
    try {
      stream = await this.services.files.readFile(this.tenantId, this.runtimeId, path);
    } catch (err) {
      if (err instanceof VesselError && err.code === 'not_found') return null;
      throw err;
    }
    const chunks: Buffer[] = [];
    let bytes = 0;
    for await (const chunk of stream as AsyncIterable<Buffer>) {
      bytes += chunk.length;
      if (bytes > maxBytes) {
        stream.destroy();
        throw failedPrecondition(`${path} in the build VM is larger than ${maxBytes} bytes`);
      }
      chunks.push(chunk);
    }
    return Buffer.concat(chunks);
  }

  makeDir(path: string): Promise<void> {
    return this.services.files.makeDir(this.tenantId, this.runtimeId, path);
  }

  async writeArchive(dir: string, tar: Readable): Promise<void> {
    await this.services.files.writeArchive(this.tenantId, this.runtimeId, dir, tar, MAX_ARCHIVE_BYTES);
  }

  async seal(key: string): Promise<string> {
    let name = layerCheckpointName(key);
    const existing = await this.services.store.checkpoints.find(this.tenantId, name);
    if (existing?.state === 'failed') await this.services.checkpoints.delete(this.tenantId, existing.id);
    // Another build sealed this key meanwhile: this layer is kept under a name of its own, uncached.
    else if (existing !== undefined) name = `${name.slice(0, 110)}-${randomBytes(4).toString('hex')}`;
    return (await this.services.checkpoints.capture(this.tenantId, this.runtimeId, { name })).id;
  }

  async destroy(): Promise<void> {
    if (this.#gone) return;
    this.#gone = true;
    await this.services.runtimes.delete(this.tenantId, this.runtimeId);
  }
}
