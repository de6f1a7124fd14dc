/**
 * The ports the core needs from the outside world. Adapters in src/store, src/vm and src/net
 * implement them; the core imports none of those adapters.
 */
import type { Readable } from 'node:stream';
import type {
  AttachRequest,
  Audit,
  Checkpoint,
  EgressAuditDetails,
  EgressAuditKind,
  EgressPolicy,
  GuestFileInfo,
  GuestFileStat,
  InjectionRule,
  Page,
  PageRequest,
  ProcessSpec,
  ProcessState,
  ProcessStream,
  ReadyCheck,
  Resources,
  Runtime,
  SealedSecret,
  Secret,
  Template,
  TemplateConfig,
  NodeLoad,
  NodeRegistration,
  TenantLimits,
  TenantUsage,
  VmNode,
  RuntimeFilter,
  Token,
} from './types.js';
import type { BuildReporter } from './build-log.js';

/** A runtime's serial console as read (console-log.ts decodes it). */
export interface ConsoleLog {
  /** UTF-8, invalid bytes as U+FFFD. */
  output: string;
  /** The bytes of the log this holds. */
  bytes: number;
  /** Whether the log held earlier output than this. */
  truncated: boolean;
}

/** Async so that a networked database (PostgreSQL) can implement it as well as SQLite. */
export interface Store {
  readonly tokens: TokenRepo;
  readonly runtimes: TenantRepo<Runtime> & {
    /** Every runtime of every tenant: for reconciliation at start-up. */
    listAll(): Promise<Runtime[]>;
    findById(id: string): Promise<Runtime | undefined>;
    /** A page of the tenant's runtimes that pass the filter, newest first: filtered before paging, so pages are full. */
    listMatching(tenantId: string, filter: RuntimeFilter, page: PageRequest): Promise<Page<Runtime>>;
    /**
     * The runtimes of one node (null: a single host's) that a lifecycle timer may act on: those
     * running, and those stopped with auto_delete_secs set. Each host asks every second, for its own.
     */
    listTimed(node: string | null): Promise<Runtime[]>;
    /**
     * A compare-and-swap for moving a runtime between VM hosts (core/runtime-moves.ts): sets its
     * node and status message, and stamps it `next.updatedAt`, only if its node and `updatedAt`
     * are still those expected. True when it did; of two racing, exactly one does.
     */
    handOver(id: string, expected: { node: string; updatedAt: string }, next: { node: string; statusMessage: string | null; updatedAt: string }): Promise<boolean>;
  };
  readonly secrets: SecretRepo;
  readonly templates: TenantRepo<Template> & {
    /** Every template of every tenant: for reconciliation at start-up. */
    listAll(): Promise<Template[]>;
  };
  readonly rules: RuleRepo;
  readonly checkpoints: CheckpointRepo;
  readonly audits: AuditRepo;
  readonly quotas: QuotaRepo;
  readonly nodes: NodeRepo;
  close(): Promise<void>;
}

/** The VM hosts of a fleet and their leases (docs/scaling.md). A single host registers none. */
export interface NodeRepo {
  /**
   * Registers the node, or renews its lease: address and capacity as given, the lease ending
   * `leaseSecs` from now by the database's clock (hosts' clocks may disagree; the database's is
   * the one every API node compares against). Keeps `draining` and `registeredAt`.
   */
  renew(node: NodeRegistration, leaseSecs: number): Promise<VmNode>;
  /** Every node ever registered, by name; `alive` as of the database's clock now. */
  list(): Promise<VmNode[]>;
  find(name: string): Promise<VmNode | undefined>;
  /** False when no node has that name. */
  setDraining(name: string, draining: boolean): Promise<boolean>;
  /** Per node name: what its runtimes hold (NodeLoad). Nodes without runtimes are absent. */
  load(): Promise<Map<string, NodeLoad>>;
  /** A value every host of the fleet must share: `proposed` if none is stored yet, else the one stored first. */
  shared(name: string, proposed: string): Promise<string>;
  /** Records (or replaces) what the operator enrolled VM host `name` with: its certificate, its copy of the egress CA. */
  enroll(name: string, credential: string): Promise<void>;
  /** What `name` was enrolled with; undefined when it never was. */
  credential(name: string): Promise<string | undefined>;
}

/** Records owned by a tenant, unique by display name within it. insert() throws already_exists. */
export interface TenantRepo<T extends { id: string; tenantId: string }> {
  insert(record: T): Promise<void>;
  /** By id first, then by display name. */
  find(tenantId: string, idOrName: string): Promise<T | undefined>;
  list(tenantId: string, page: PageRequest): Promise<Page<T>>;
  update(record: T): Promise<void>;
  delete(tenantId: string, id: string): Promise<boolean>;
}

/**
 * A tenant's secrets. Reads give what a secret is, never its value: the sealed value is read
 * apart, by the processes that hold the master key (API nodes, a single host). A fleet's VM host
 * may not read it at all (its database role has no SELECT on the column; docs/scaling.md).
 */
export interface SecretRepo {
  insert(secret: SealedSecret): Promise<void>;
  /** By id first, then by display name. */
  find(tenantId: string, idOrName: string): Promise<Secret | undefined>;
  list(tenantId: string, page: PageRequest): Promise<Page<Secret>>;
  delete(tenantId: string, id: string): Promise<boolean>;
  /** The tenant's secret with this id (never a name) and its sealed value. */
  findSealed(tenantId: string, id: string): Promise<SealedSecret | undefined>;
}

export interface TokenRepo {
  insert(token: Token): Promise<void>;
  /** Upsert, used for the bootstrap admin token whose id is fixed. */
  put(token: Token): Promise<void>;
  findByHash(hash: string): Promise<Token | undefined>;
  findById(id: string): Promise<Token | undefined>;
  list(): Promise<Token[]>;
  /** Newest first, a page at a time; revoked tokens included. */
  page(filter: TokenFilter): Promise<Page<Token>>;
  revoke(id: string, at: string): Promise<boolean>;
}

export interface TokenFilter extends PageRequest {
  tenantId?: string | undefined;
}

export interface RuleRepo {
  insert(rule: InjectionRule): Promise<void>;
  find(tenantId: string, id: string): Promise<InjectionRule | undefined>;
  list(tenantId: string, page: PageRequest, runtimeId?: string): Promise<Page<InjectionRule>>;
  /** All rules of one runtime, for the egress gateway. */
  listForRuntime(runtimeId: string): Promise<InjectionRule[]>;
  countForSecret(secretId: string): Promise<number>;
  /** Whether a rule of a runtime the store places on VM host `node` names the tenant's secret `secretId`. */
  namesSecretOnNode(tenantId: string, secretId: string, node: string): Promise<boolean>;
  delete(tenantId: string, id: string): Promise<boolean>;
  deleteForRuntime(runtimeId: string): Promise<number>;
}

export interface CheckpointRepo {
  insert(checkpoint: Checkpoint): Promise<void>;
  /** A tenant sees its own checkpoints and, with includeSystem, the service's. Deleted ones are hidden. */
  find(tenantId: string | null, idOrName: string, includeSystem?: boolean): Promise<Checkpoint | undefined>;
  list(tenantId: string, page: PageRequest, includeSystem: boolean): Promise<Page<Checkpoint>>;
  listAll(): Promise<Checkpoint[]>;
  update(checkpoint: Checkpoint): Promise<void>;
  /** Records that its files are now on VM host `to`, if they were on `from` and it is not deleted; false otherwise. */
  moveNode(id: string, from: string, to: string): Promise<boolean>;
  /** Removes the row for good; the core calls it once no runtime needs the files. */
  purge(id: string): Promise<void>;
  /**
   * Records that a checkpoint is in object storage, with the digest of its record there
   * (CheckpointArchive), unless it was deleted meanwhile: false then.
   */
  setArchived(id: string, digest: string): Promise<boolean>;
  /** The digest of a checkpoint's record in object storage; null while it is not stored there. */
  archiveDigest(id: string): Promise<string | null>;
  /** The ready tenant checkpoints on this VM host (null: a single host's) not yet in object storage, oldest first. */
  listUnarchived(node: string | null): Promise<string[]>;
}

/** A tenant's own limits, where an operator set them; null puts one back to the default. */
export type TenantLimitOverrides = { [K in keyof TenantLimits]?: number | null };

export interface QuotaRepo {
  /**
   * What the tenant holds: all its runtimes, the vCPUs and memory limits (in force, not pending)
   * of those that hold a VM (LIVE_STATUSES), its checkpoints not deleted, and the disk bytes of
   * the ready ones; its templates in any state, and the disk bytes of the ready ones.
   */
  usage(tenantId: string): Promise<TenantUsage>;
  overrides(tenantId: string): Promise<Partial<TenantLimits>>;
  /** Changes only the limits given. */
  setOverrides(tenantId: string, overrides: TenantLimitOverrides): Promise<void>;
  /**
   * Runs `work` while no other process using this store does so for the same tenant: a quota's
   * check and the write that consumes it, as one for every process. The store's own writes
   * inside `work` commit before the next one starts. Absent from a store one process serves
   * alone (SQLite), where the caller's own lock is enough.
   */
  exclusive?<T>(tenantId: string, work: () => Promise<T>): Promise<T>;
}

export interface AuditFilter extends PageRequest {
  category?: string | undefined;
  runtimeId?: string | undefined;
}

/** How many audits are kept: per tenant, and per runtime whatever its tenant's other runtimes record. */
export interface AuditRetention {
  perTenant: number;
  perRuntime: number;
}

export interface AuditRepo {
  insert(audits: Audit[]): Promise<void>;
  /** Newest first, a page at a time. */
  list(tenantId: string, filter: AuditFilter): Promise<Page<Audit>>;
  /**
   * For each of these tenants, deletes its audits older than its newest `perTenant`, except the
   * newest `perRuntime` of each of its runtimes that still exists. Returns how many went.
   */
  prune(tenantIds: string[], retention: AuditRetention): Promise<number>;
}

/**
 * The guest side of every runtime's network, the same in every VM: each VM sits alone on its own
 * TAP link, so no two ever meet, and a fork needs no change inside the guest. The gateway tells
 * VMs apart by the TAP they arrive on (see src/net/nftables.ts).
 */
export const GUEST_NETWORK = {
  address: '10.127.0.2',
  prefixLength: 30,
  gateway: '10.127.0.1',
  mac: '52:54:00:76:73:02',
} as const;

/** What the driver needs to bring a VM up. */
export interface VmSpec {
  runtimeId: string;
  resources: Resources;
  /** Boot from this checkpoint's memory and disk instead of the system template. */
  fromCheckpointId: string | null;
  /**
   * Without a checkpoint: boot afresh on this template's root disk (TemplateDisks) instead of the
   * guest image's. Absent or null: the guest image.
   */
  templateId?: string | null;
  hostname: string;
  /** The host TAP device of the VM's NIC; null gives a NIC that is connected to nothing. */
  tap: string | null;
  /**
   * With `fromCheckpointId`: restored and left paused, nothing of the guest run, until resume()
   * (a runtime moving here, which must not run before it is this host's: runtime-moves.ts).
   */
  paused?: boolean;
}

/** What the gateway enforces for one runtime: its policy and its injection rules. */
export interface EgressSubject {
  runtimeId: string;
  tenantId: string;
  policy: EgressPolicy;
  rules: InjectionRule[];
}

/** A secret's plaintext for the gateway, and how long the gateway may keep it. */
export interface RevealedSecret {
  value: string;
  cacheTtlSecs: number;
}

/**
 * Where a fleet's VM host gets the plaintext of a secret its gateway injects, when it holds no
 * master key: an API node, which opens it only for a rule of a runtime on that host
 * (src/cluster/secret-unsealing.ts). Null when the secret is gone.
 */
export interface SecretUnsealer {
  unseal(tenantId: string, secretId: string): Promise<RevealedSecret | null>;
}

/** What the gateway asks of the core while it runs. */
export interface GatewayHooks {
  /** The plaintext of a rule's secret and how long the gateway may keep it. */
  revealSecret(tenantId: string, secretId: string): Promise<RevealedSecret | null>;
  audit<K extends EgressAuditKind>(runtimeId: string, tenantId: string, kind: K, detail: EgressAuditDetails[K]): void;
  /** Egress and ingress are activity: they keep a runtime from being suspended as idle. */
  activity(runtimeId: string): void;
  /**
   * The running runtime with this id (never a display name: names are unique only per tenant)
   * whose ingress_specs expose `port`, or null. Called for unauthenticated ingress connections.
   */
  ingressTarget(runtimeId: string, port: number): Promise<{ runtimeId: string; protocol: 'http' | 'https' } | null>;
}

export interface NetworkGateway {
  /**
   * Gives the runtime its TAP and its place in the filter rules, and starts enforcing its
   * policy. Idempotent: a runtime keeps its TAP across stop and start. Returns the TAP name.
   */
  attach(subject: EgressSubject): Promise<string>;
  /** A new policy or rule set: once this resolves, the next connection and the next request see it. */
  update(subject: EgressSubject): Promise<void>;
  /** Removes the runtime's TAP and rules. Idempotent. */
  detach(runtimeId: string): Promise<void>;
  /** At start-up: keeps the TAPs of these runtimes, removes every other one, rewrites the rules. */
  restore(subjects: EgressSubject[]): Promise<void>;
  close(): Promise<void>;
}

export type LiveState = 'running' | 'paused' | 'gone';

export interface HostLimits {
  vcpus: number;
  memoryMib: number;
}

/** A checkpoint as the VM host that holds it describes it: its manifest, and that host's guest image. */
export interface CheckpointDescription {
  /** The driver's own manifest; another host's driver checks it before it trusts any of it. */
  manifest: unknown;
  /** The digest of the guest image's files: a checkpoint's disk layers sit on that exact image. */
  image: string;
  /** The files a copy of it must take, as `open` and readCheckpointFile name them: its layers, 'state', 'ram'. */
  files: string[];
}

/** Another VM host's checkpoint, as the host that copies it reads it. */
export interface RemoteCheckpoint {
  description: CheckpointDescription;
  /** One of its files' frames: 'state', 'ram', or a disk layer's id. */
  open(file: string): Promise<AsyncIterable<Buffer>>;
}

/**
 * Object storage for checkpoints, so that one outlives the VM host that captured it
 * (docs/scaling.md, "Object storage"). The store records the digest `upload` answers: what
 * `open` is later checked against, so the bucket alone cannot make a checkpoint be something else.
 */
export interface CheckpointArchive {
  /** Stores a ready checkpoint's files (those its description names) and its description; idempotent. Resolves with the digest of what was stored. */
  upload(checkpointId: string, source: RemoteCheckpoint): Promise<string>;
  /** The stored checkpoint, read as another host's is by importCheckpoint; every chunk is checked on its way. */
  open(checkpointId: string, digest: string): Promise<RemoteCheckpoint>;
  /** Forgets a deleted checkpoint's description; its chunks are left (other checkpoints may share them). */
  forget(checkpointId: string): Promise<void>;
}

/*
 * The VM host, split by what changes together: the machines (QMP, QEMU processes, memory),
 * what runs inside one guest (its agent), and the checkpoints' files. A core service takes only
 * the ports it uses; VmDriver is their composition, for the wiring (cli/serve.ts) and tests.
 */

/** The VMs of this host as machines: booted, paused, stopped, sized, watched. */
export interface Machines {
  /** Human-readable reason when the driver cannot run VMs on this host; null when it can. */
  unavailableReason(): string | null;
  /** Identifies the guest image; system checkpoints are made per image. */
  imageId(): string;
  /** The largest VM this host could ever run: its CPUs, and its memory less what the host keeps. */
  hostLimits(): HostLimits;
  /** Boots the image once with these resources and captures it as the checkpoint's files. */
  createTemplate(checkpointId: string, resources: Resources): Promise<void>;
  /** Removes leftovers of work cut short by a crash (template VMs, unreferenced disk layers). */
  sweep(): Promise<void>;
  /**
   * Creates the runtime's disk and boots it; resolves once the guest agent answers. Throws
   * unavailable, having started nothing, when the host lacks the memory for it.
   */
  create(spec: VmSpec): Promise<void>;
  /**
   * Like create, for a spare the warm pool keeps: the VM waits, clock set, until a create with
   * its runtime id claims it and only names it and reseeds its entropy.
   */
  createSpare(spec: VmSpec): Promise<void>;
  /** Boots an existing runtime's disk again after a stop or crash, or restores a suspended one. */
  start(spec: VmSpec): Promise<void>;
  pause(runtimeId: string): Promise<void>;
  resume(runtimeId: string): Promise<void>;
  /** Saves the whole VM (memory, devices) into the runtime's own files and ends its process. start() restores it. */
  suspend(runtimeId: string): Promise<void>;
  /** Graceful shutdown through the guest agent with a deadline, then kill. The disk stays. */
  stop(runtimeId: string, deadlineMs: number): Promise<void>;
  /** Kills the VM if it runs and removes all its files. Idempotent. */
  destroy(runtimeId: string): Promise<void>;
  /** The guest's memory through the balloon; the host gets back what the guest gives up. */
  setMemoryTarget(runtimeId: string, mib: number): Promise<void>;
  /**
   * After a service restart: reattach to a VM left running, or report it gone. Throws, saying
   * why, when a VM is there but cannot be taken back (its state file is damaged); it is stopped.
   */
  reattach(runtimeId: string): Promise<LiveState>;
  /**
   * The last `maxBytes` of what the runtime's guest wrote to its serial console, across the cut
   * its log rotation makes; null when the runtime has no console log (no VM was ever started,
   * or its files are gone). Works whatever the VM's state, crashed included.
   */
  readConsoleLog(runtimeId: string, maxBytes: number): Promise<ConsoleLog | null>;
  /** The runtimes this host has files of (templates and warm-pool spares aside). */
  runtimeIds(): Promise<string[]>;
  /** Called when a VM's process exits without being asked to. */
  onUnexpectedExit(listener: (runtimeId: string) => void): void;
  /** Stops watching VMs and closes sockets; the VMs themselves keep running. */
  close(): Promise<void>;
}

/**
 * Inside one running runtime, through its guest agent: processes, terminals, files, directories
 * and archives. Every call throws unavailable when the runtime has no VM or its agent does not answer.
 */
export interface GuestAgent {
  /**
   * Starts a process in the guest and resolves once it runs; throws command_failed when it
   * cannot start (no such directory or program), unavailable when the guest does not answer.
   */
  spawnProcess(spec: ProcessSpec): Promise<ProcessStream>;
  /**
   * Reads a process the guest keeps. An offset older than its ring holds starts at the oldest
   * byte held, and the first chunk counts what was lost; one past the end waits for new output.
   */
  attachProcess(processId: number, request: AttachRequest): Promise<ProcessStream>;
  /** Every process the guest keeps, running or exited. */
  listProcesses(): Promise<ProcessState[]>;
  /** Delivers a signal to the process, or to its whole tree. */
  signalProcess(processId: number, signal: number, tree: boolean): Promise<void>;
  /** A terminal's new size; the foreground program gets SIGWINCH. */
  resizeTerminal(processId: number, rows: number, cols: number): Promise<void>;
  /** Drops an exited process and its retained output. */
  forgetProcess(processId: number): Promise<void>;
  readFile(path: string): Promise<Readable>;
  writeFile(path: string, body: Readable, maxBytes: number): Promise<number>;
  /** A directory's entries, without . and .., symbolic links not followed, sorted by name. */
  listDir(path: string): Promise<GuestFileInfo[]>;
  statPath(path: string, followSymlinks: boolean): Promise<GuestFileStat>;
  /** mkdir -p: existing directories on the way, the last one included, are fine. */
  makeDir(path: string): Promise<void>;
  /** A file, a link or an empty directory; with `recursive`, a whole tree. */
  removePath(path: string, recursive: boolean): Promise<void>;
  /**
   * A tar archive of the directory's contents. Resolves once the first bytes exist, so that a
   * failure before them is an error status; a failure after them destroys the stream with an error.
   */
  readArchive(dir: string): Promise<Readable>;
  /** Extracts a tar archive into the directory, made first with its parents; resolves with the bytes taken. */
  writeArchive(dir: string, body: Readable, maxBytes: number): Promise<number>;
}

/** Reaches the guest agent of a runtime. Cheap: nothing is checked until a call is made. */
export interface GuestAgents {
  guest(runtimeId: string): GuestAgent;
}

/** The checkpoints' files on this host: captured, checked, moved between hosts, deleted. */
export interface CheckpointFiles {
  /** Captures the runtime into the checkpoint's files; resolves with the disk space they take. */
  checkpoint(runtimeId: string, checkpointId: string): Promise<{ bytes: number }>;
  /**
   * Captures a runtime with no VM (shut down, crashed) as a checkpoint of its disk alone, under
   * this shape, for a move (runtime-moves.ts). Its own disk is left as it is.
   */
  captureDisk(runtimeId: string, checkpointId: string, shape: { memoryMib: number; vcpus: number }): Promise<void>;
  /** Makes a runtime with no VM here whose disk is that of a captureDisk checkpoint; start() boots it. */
  adoptDisk(runtimeId: string, checkpointId: string): Promise<void>;
  /** Checks a ready checkpoint's files against what they were at capture: what is wrong, or null. */
  verifyCheckpoint(checkpointId: string): Promise<string | null>;
  deleteCheckpoint(checkpointId: string): Promise<void>;
  /** The checkpoints this host holds files of, whatever their state. */
  heldCheckpointIds(): Promise<string[]>;
  /**
   * Disk bytes of the layers these runtimes and checkpoints stand on whose own checkpoint was
   * deleted: still held, counted by no checkpoint's size.
   */
  orphanedLayerBytes(runtimeIds: string[], checkpointIds: string[]): Promise<number>;
  /** What another VM host needs to take a ready checkpoint's files (docs/scaling.md, "Moving checkpoints"). */
  describeCheckpoint(checkpointId: string): Promise<CheckpointDescription>;
  /** One of a checkpoint's files, framed for the move (src/vm/sparse-stream.ts): 'state', 'ram', or a layer of its chain. */
  readCheckpointFile(checkpointId: string, file: string): Promise<Readable>;
  /**
   * Copies a checkpoint from another host into this one's files, each file checked against the
   * digests its manifest recorded at capture; the disk layers this host already holds are kept.
   * Throws failed_precondition when the two hosts' QEMU or guest image differ, or when its
   * manifest's shape is not `expected` (what the store records). A copy held here already is
   * checked against its digests, and replaced when it does not match them.
   */
  importCheckpoint(checkpointId: string, source: RemoteCheckpoint, expected: { memoryMib: number; vcpus: number }): Promise<void>;
}

/** What a template build starts from: its source, with the registry's credentials revealed. */
export type BuildSource =
  | { kind: 'image'; image: string; credentials: { username: string; password: string } | null }
  /** The archive receiveArchive took for this template. */
  | { kind: 'archive' }
  /** The build context receiveArchive took, with the Dockerfile at this path in it; its RUNs and start command run in `vms`. */
  | { kind: 'dockerfile'; dockerfile: string; buildArgs: Record<string, string>; vms: BuildVms; ready: ReadyCheck };

/** A template's root disk, built and ready for the VM host to take. */
export interface BuiltTemplate {
  config: TemplateConfig;
  /** The disk's size as the guest sees it. */
  diskBytes: number;
  /** A Dockerfile's template: the checkpoint of its last step, which runtimes from it fork. */
  checkpointId?: string;
}

/** Where a Dockerfile build starts: the default image, a ready template of the tenant's, or a cached layer. */
export type BuildVmBase = { kind: 'default' } | { kind: 'template'; templateId: string } | { kind: 'layer'; checkpointId: string };

/**
 * The VMs of one Dockerfile build (docs/templates.md, "Dockerfile builds"): runtimes of the
 * template's tenant, with the build's egress policy, and its cache of sealed layers. Everything a
 * build runs, runs in them; nothing of it on the host.
 */
export interface BuildVms {
  /** The default image's id: what a build FROM it stands on, for its cache key. */
  defaultImageId(): string;
  /** A ready template of the tenant's (id or name) to build FROM; not_found or failed_precondition otherwise. */
  template(ref: string): Promise<{ id: string; config: TemplateConfig }>;
  /** The checkpoint holding the layer cached under `key`, when the tenant has it. */
  findLayer(key: string): Promise<string | null>;
  start(base: BuildVmBase): Promise<BuildVm>;
}

/** A running build VM. */
export interface BuildVm {
  /** Runs a command as `user` (Docker's user[:group]) to its end, its output (both channels) to `onOutput`; resolves with its exit code. */
  run(argv: string[], env: Record<string, string>, cwd: string, user: string, onOutput: (text: string) => void, signal: AbortSignal): Promise<number>;
  /** A small file of the guest's (at most `maxBytes`), or null when there is none. */
  readFile(path: string, maxBytes: number): Promise<Buffer | null>;
  makeDir(path: string): Promise<void>;
  /** Extracts a tar stream into the directory; owners and modes as the stream says. */
  writeArchive(dir: string, tar: Readable): Promise<void>;
  /**
   * Starts a background process as `user` (the template's start command), which goes on running
   * in every layer sealed after and in every fork of them; resolves with its id in the guest.
   */
  startProcess(argv: string[], env: Record<string, string>, cwd: string, user: string): Promise<number>;
  /** A background process's exit code (128 + n when signal n ended it), or null while it runs. */
  exitCodeOf(processId: number): Promise<number | null>;
  /** The end of a background process's output, at most `maxBytes`, both channels as they came. */
  outputTail(processId: number, maxBytes: number): Promise<string>;
  /** Freezes the VM as the layer cached under `key`: resolves with its checkpoint's id. The VM goes on, on that layer. */
  seal(key: string): Promise<string>;
  /** Stops the VM and removes it. Idempotent. */
  destroy(): Promise<void>;
}

/**
 * Builds templates' root disks (docs/templates.md, "The build"). Each build has files of its own,
 * named by the template's id; discard() removes them.
 */
export interface TemplateBuilder {
  /** Takes an uploaded image archive into the build's files, at most `maxBytes`; resolves with its size. */
  receiveArchive(templateId: string, body: Readable, maxBytes: number): Promise<number>;
  /**
   * Builds the root disk, reporting each step; throws a BuildFailure (or any error: the step
   * running failed) when it cannot, and stops at the next step once `signal` aborts.
   */
  build(templateId: string, source: BuildSource, report: BuildReporter, signal: AbortSignal): Promise<BuiltTemplate>;
  /** Removes the build's files. Idempotent. */
  discard(templateId: string): Promise<void>;
}

/** A run of a template disk's bytes, at its offset in the disk (what is not sent is zeros). */
export interface DiskChunk {
  offset: number;
  data: Buffer;
}

/**
 * Templates' root disks as the VM host keeps them (docs/templates.md, "Where the image build
 * runs"): a builder hands each finished disk over, and a template's delete takes it away.
 */
export interface TemplateDisks {
  /**
   * Writes the template's disk, `sizeBytes` long, from its non-zero chunks in order of offset.
   * Throws when the template already has one, or the chunks are out of order or out of bounds.
   */
  importTemplateDisk(templateId: string, sizeBytes: number, chunks: AsyncIterable<DiskChunk>): Promise<void>;
  /** Removes the template's disk; failed_precondition while runtimes or checkpoints stand on it. Idempotent. */
  deleteTemplateDisk(templateId: string): Promise<void>;
}

/** A whole VM host: what cli/serve.ts wires in and tests fake. */
export type VmDriver = Machines & GuestAgents & CheckpointFiles;
