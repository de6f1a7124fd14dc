/** Domain records. Value objects that the spec defines (resources, egress policy, ingress) keep its field names. */

export const RUNTIME_STATUSES = ['running', 'paused', 'shutdown', 'creating', 'deleting', 'error', 'crashed', 'suspended'] as const;
export type RuntimeStatus = (typeof RUNTIME_STATUSES)[number];
/**
 * What a runtime's status may read as: the stored ones, and `unavailable` for one whose VM host
 * has lost its lease (docs/scaling.md). Never stored: the host's runtimes keep their real status
 * for when it comes back.
 */
export const SHOWN_RUNTIME_STATUSES = [...RUNTIME_STATUSES, 'unavailable'] as const;
export type ShownRuntimeStatus = (typeof SHOWN_RUNTIME_STATUSES)[number];

export interface Resources {
  limits: { memory_mib: number };
  requests: { memory_mib: number };
  vcpus: number;
}

export interface EgressPolicy {
  enabled: boolean;
  allowed_hosts: string[];
}

export interface IngressSpec {
  protocol: 'http' | 'https';
  runtime_port: number;
}

/** What a runtime does on its own when left alone (docs/api.md, "Lifecycle settings"). */
export interface LifecycleSettings {
  /** Seconds without activity before on_idle applies; null: the service default (VESSEL_IDLE_SUSPEND_SECS); 0: never. */
  idleTimeoutSecs: number | null;
  onIdle: 'suspend' | 'stop';
  /** Seconds after it stopped running before the runtime is deleted; null: never. */
  autoDeleteSecs: number | null;
}

export const DEFAULT_LIFECYCLE: Readonly<LifecycleSettings> = { idleTimeoutSecs: null, onIdle: 'suspend', autoDeleteSecs: null };

export interface Runtime {
  id: string;
  tenantId: string;
  displayName: string;
  status: RuntimeStatus;
  /** Why the runtime is in `error` or `crashed`; shown to the user. */
  statusMessage: string | null;
  egressPolicy: EgressPolicy;
  ingressSpecs: IngressSpec[];
  /** What is in force now. */
  resources: Resources;
  /** Limits changed while running that take effect at the next start. */
  pendingResources: Resources | null;
  /** The checkpoint whose disk layer this runtime's overlay sits on, if any. */
  baseCheckpointId: string | null;
  /** The template it was created from (its disk's bottom, its execs' defaults); null: the built-in image. */
  templateId: string | null;
  /** The VM host that runs it (docs/scaling.md); null on a single host (`--role all`). */
  node: string | null;
  /** The user's own key/value tags (runtime-settings.ts bounds them). */
  labels: Record<string, string>;
  /** Set at create: every exec, process and terminal gets these over its template's, under its own. */
  env: Record<string, string>;
  lifecycle: LifecycleSettings;
  /**
   * Where the auto-delete clock starts: when the runtime last stopped running (shutdown,
   * suspended, crashed, error), or a later PATCH of auto_delete_secs; null while it runs.
   */
  stoppedAt: string | null;
  createdAt: string;
  updatedAt: string;
}

/** What a runtime list keeps (docs/api.md, "Listing runtimes"): every condition holds. */
export interface RuntimeFilter {
  /** Each label key must be present, with this value unless it is null. */
  labels: Array<[key: string, value: string | null]>;
  /** Any of these statuses; empty: every status. */
  statuses: RuntimeStatus[];
}

/** What a secret is, as every reader of the store may see it: never its value, sealed or not. */
export interface Secret {
  id: string;
  tenantId: string;
  displayName: string;
  cacheTtlSecs: number;
  createdAt: string;
}

/** A secret as it is stored: with its value, AES-256-GCM sealed under the master key (secret-box.ts). */
export interface SealedSecret extends Secret {
  sealedValue: string;
}

export interface InjectionConfig {
  headerName: string;
  valueFormat?: string;
  paramName?: string;
  paramFormat?: string;
  value?: string;
  [extra: string]: unknown;
}

export interface InjectionRule {
  id: string;
  tenantId: string;
  runtimeId: string;
  secretId: string;
  hostPattern: string;
  pathPattern: string;
  injection: InjectionConfig;
  createdAt: string;
}

export const CHECKPOINT_STATES = ['creating', 'ready', 'failed'] as const;
export type CheckpointState = (typeof CHECKPOINT_STATES)[number];

export interface Checkpoint {
  id: string;
  /** null for system checkpoints, which belong to the service. */
  tenantId: string | null;
  displayName: string;
  state: CheckpointState;
  stateMessage: string | null;
  resources: Resources;
  sourceRuntimeId: string | null;
  /** The template its source runtime was created from; its forks are from it too. */
  templateId: string | null;
  /** The checkpoint whose disk layer this one's layer sits on. */
  parentCheckpointId: string | null;
  /** Hidden from users (deleted) but kept while forks still need its files. */
  deleted: boolean;
  /** Disk space its files take, known once it is ready; null before, and for checkpoints captured before it was measured. */
  diskBytes: number | null;
  /** The VM host that holds its files; null on a single host (`--role all`). */
  node: string | null;
  createdAt: string;
}

export const TEMPLATE_STATES = ['building', 'ready', 'failed'] as const;
export type TemplateState = (typeof TEMPLATE_STATES)[number];

/** What a template is built from (docs/templates.md). */
export type TemplateSource =
  /** An image in a registry; its credentials, if any, are the value of a secret of the tenant's (`user:password`). */
  | { kind: 'image'; image: string; registrySecretId: string | null }
  /** A `docker save` or OCI archive uploaded with the create. */
  | { kind: 'archive'; archiveBytes: number }
  /**
   * A Dockerfile in a build context uploaded with the create (its path in the context), built in
   * build VMs whose egress follows `egressPolicy`.
   */
  | { kind: 'dockerfile'; contextBytes: number; dockerfile: string; buildArgs: Record<string, string>; egressPolicy: EgressPolicy; ready?: ReadyCheck };

/**
 * When a Dockerfile's start command (CMD/ENTRYPOINT) is up, so that its template may be sealed
 * with it running (docs/templates.md, "The start command"). Neither a command nor a port: sealed
 * as soon as it runs. Records from before it existed have none.
 */
export interface ReadyCheck {
  /** A shell command run in the build VM, as the template's USER, until it exits 0. */
  command: string | null;
  /** A TCP port in the guest that accepts a connection (checked from inside the guest). */
  port: number | null;
  /** How long the start command has to become ready before the build fails. */
  timeoutSecs: number;
}

/** Why a build failed: the step, its exit code when it ran a command, and the end of its output. */
export interface TemplateFailure {
  step: string;
  exitCode: number | null;
  outputTail: string;
}

/**
 * What every exec, process and terminal of a runtime from the template defaults to, and its start
 * command: the image's config (ENV, WORKDIR, USER, ENTRYPOINT, CMD).
 */
export interface TemplateConfig {
  env: Record<string, string>;
  workdir: string | null;
  user: string | null;
  entrypoint: string[] | null;
  cmd: string[] | null;
}

export interface Template {
  id: string;
  tenantId: string;
  displayName: string;
  state: TemplateState;
  source: TemplateSource;
  /** Set when `failed`. */
  failure: TemplateFailure | null;
  /** Set when `ready`. */
  config: TemplateConfig | null;
  /** The root disk's size on the host's disk, once ready. */
  diskBytes: number | null;
  /**
   * Built from a Dockerfile: the checkpoint of its last build step, which runtimes from the
   * template fork. Null for an image's template, whose runtimes boot on its disk.
   */
  checkpointId: string | null;
  /** The VM host that holds its disk; null on a single host. */
  node: string | null;
  createdAt: string;
  updatedAt: string;
}

/** What a VM host can hold (docs/scaling.md, "Placement"). */
export interface NodeCapacity {
  memoryMib: number;
  vcpus: number;
  runtimes: number;
  /** Free space in its data directory when it last renewed its lease. */
  diskBytes: number;
}

/** What the runtimes placed on a node hold: vCPUs and memory limits of those with a VM, and every runtime. */
export interface NodeLoad {
  memoryMib: number;
  vcpus: number;
  runtimes: number;
}

/** What a VM host says of itself each time it renews its lease. */
export interface NodeRegistration {
  name: string;
  /**
   * The host's own id, kept in its data directory: while one host's lease on a name runs, a
   * renewal under that name by another host is refused (docs/scaling.md, "Leases").
   */
  holder: string;
  /** Where API nodes reach its hop listener: `http://host:port`. */
  internalUrl: string;
  /** Where its runtime ingress listener is reached, `host:port`; null when it runs none. */
  ingressAddress: string | null;
  capacity: NodeCapacity;
}

/** A VM host of a fleet, as the store knows it. */
export interface VmNode extends NodeRegistration {
  /** No new placements while set (`vessel node drain`). */
  draining: boolean;
  /** Whether its lease is in force now, by the database's clock. */
  alive: boolean;
  leaseExpiresAt: string;
  /** When it first registered. */
  registeredAt: string;
}

/** What one tenant may hold at once, whatever the host could give it (docs/api.md, "Quotas"). */
export interface TenantLimits {
  /** Runtimes in any state. */
  runtimes: number;
  /** Sums over the runtimes that hold a VM (creating, running, paused). */
  vcpus: number;
  memoryMib: number;
  /** Checkpoints not deleted, in any state. */
  checkpoints: number;
  /** Disk space of the ready checkpoints. */
  checkpointGib: number;
  /** Templates in any state. */
  templates: number;
  /** Root disk space of the ready templates. */
  templateGib: number;
}

/** What a tenant holds, counted as its limits are. */
export interface TenantUsage {
  runtimes: number;
  vcpus: number;
  memoryMib: number;
  checkpoints: number;
  checkpointBytes: number;
  templates: number;
  templateBytes: number;
}

/**
 * What the gateway records of each kind of egress (DESIGN.md, "Audits"): action, host, ip, port
 * and reason, and for HTTP the status and, once the request was read, method, path and the
 * rules that injected. src/api/schemas.ts documents the same shapes.
 */
interface EgressAuditFields {
  action: 'allow' | 'deny';
  host: string | null;
  ip: string | null;
  /** The text fields cut to MAX_AUDIT_FIELD_CHARS (core/egress.ts). */
  truncated?: string[];
}

export interface EgressAuditDetails {
  tcp_connection: EgressAuditFields & { port: number; reason: string };
  http_request: EgressAuditFields & { port: number; status: number; reason: string; method?: string; path?: string; rule_ids?: string[] };
  icmp_drop: EgressAuditFields & { action: 'deny'; host: null; ip: null; port: null; reason: 'icmp_dropped'; count: number };
}

export type EgressAuditKind = keyof EgressAuditDetails;
export type EgressAuditDetail = EgressAuditDetails[EgressAuditKind];

/** What a lifecycle timer did to a runtime on its own (docs/api.md, "Lifecycle settings"). */
export interface LifecycleAuditDetail {
  /** What a lifecycle timer did, or `move`: an operator moved the runtime to another VM host. */
  action: 'suspend' | 'stop' | 'delete' | 'move';
  reason: string;
  /** The runtime's display name then: after a delete, nothing else tells the user which it was. */
  runtime_name: string;
}

interface AuditFields {
  id: string;
  tenantId: string;
  runtimeId: string;
  createdAt: string;
}

/** Externally tagged by category: the payload's one property is the category. */
export type Audit = AuditFields &
  (
    | { category: 'egress'; payload: { egress: { kind: EgressAuditKind } & Partial<EgressAuditDetails> } }
    | { category: 'lifecycle'; payload: { lifecycle: LifecycleAuditDetail } }
  );

export const AUDIT_CATEGORIES = ['egress', 'lifecycle'] as const;

export const SCOPES = [
  'runtimes:read',
  'runtimes:write',
  'exec',
  'files:read',
  'files:write',
  'secrets:read',
  'secrets:write',
  'checkpoints:read',
  'checkpoints:write',
  'templates:read',
  'templates:write',
  'audits:read',
  'admin',
] as const;
export type Scope = (typeof SCOPES)[number];

export interface Token {
  id: string;
  tenantId: string;
  name: string;
  hash: string;
  scopes: Scope[];
  createdAt: string;
  revokedAt: string | null;
}

/** Who is calling: resolved from the bearer token by the API, used by the core for tenancy. */
export interface Principal {
  tokenId: string;
  tenantId: string;
  scopes: ReadonlySet<Scope>;
}

export interface PageRequest {
  limit: number;
  pageToken?: string | undefined;
}

export interface Page<T> {
  items: T[];
  nextPageToken?: string | undefined;
}

export interface ExecRequest {
  command: string;
  args: string[];
  cwd: string | null;
  env: Record<string, string>;
  /** Docker's `user[:group]`, resolved in the guest's own /etc/passwd and /etc/group; null: the runtime's default (its template's USER, else root). */
  user: string | null;
  stdin: string | null;
  maxOutputBytes: number;
  timeoutSecs: number;
}

export interface ExecResult {
  exit_code: number;
  duration_ms: number;
  stdout: string;
  stdout_truncated: boolean;
  stderr: string;
  stderr_truncated: boolean;
}

/** What to start in the guest: the exec request's command form, with a terminal or stdin if asked. */
export interface ProcessSpec {
  command: string;
  args: string[];
  cwd: string | null;
  env: Record<string, string>;
  /** As ExecRequest's; null here is root (the runtime's default is applied before: ProcessService). */
  user: string | null;
  /** A terminal of this size instead of pipes; stdout then carries everything it shows. */
  pty: { rows: number; cols: number } | null;
  /** Keep stdin open for writes (a terminal always takes input). */
  stdin: boolean;
  /** Output retained per channel for readers that come later (bytes). */
  ringBytes: number;
  /**
   * While this stream reads, the process never outruns it: no byte is dropped before it is
   * delivered (streaming exec). Otherwise output goes to the ring whether anyone reads or not.
   */
  hold: boolean;
  /** Drop the process from the guest's table once this stream has delivered its exit. */
  forgetOnExit: boolean;
}

export type ProcessStatus = 'running' | 'exited' | 'signaled';

/** A process the guest agent keeps. Offsets count every byte a channel ever produced. */
export interface ProcessState {
  id: number;
  pid: number;
  command: string;
  status: ProcessStatus;
  exitCode: number | null;
  signal: number | null;
  pty: boolean;
  stdinOpen: boolean;
  startedAt: Date;
  endedAt: Date | null;
  /** What each channel's ring still holds: [start, end). */
  stdout: { start: number; end: number };
  stderr: { start: number; end: number };
}

export type OutputChannel = 'stdout' | 'stderr';

export interface ProcessOutput {
  channel: OutputChannel;
  /** Where `data` starts in the channel. */
  offset: number;
  data: Buffer;
  /** Bytes the ring dropped between the previous chunk of this channel and this one. */
  lost: number;
}

/**
 * One reader of a process: its output as it comes (reading is what lets the guest send more),
 * its stdin when it owns it, and its end.
 */
export interface ProcessStream extends AsyncIterable<ProcessOutput> {
  /** The process as it was when the stream began. */
  readonly state: ProcessState;
  /** The final state once the process exited and its output was delivered; null when the stream ended first. */
  readonly done: Promise<ProcessState | null>;
  /**
   * Where this reader's first byte of each channel is. A reader's position is this plus what it
   * has taken, never what the stream has received ahead of it: that is what a client resumes from.
   */
  readonly start: { stdout: number; stderr: number };
  write(data: Buffer): Promise<void>;
  /** Closes stdin once what was written is taken. */
  endInput(): void;
  /** Stops reading; the process runs on. */
  detach(): void;
}

export interface AttachRequest {
  /** Per-channel offsets, the oldest retained byte, or now. */
  from: { stdout: number; stderr: number } | 'oldest' | 'end';
  /** Stream until the process exits, or stop at what exists now. */
  follow: boolean;
  /** Take over the process's stdin. */
  input: boolean;
}

/** Kinds of file a guest path can be, as the API names them. */
export const GUEST_FILE_TYPES = ['file', 'directory', 'symlink', 'char', 'block', 'fifo', 'socket', 'other'] as const;
export type GuestFileType = (typeof GUEST_FILE_TYPES)[number];

/** One path in a runtime's file system: a directory's entry, or what a stat describes. */
export interface GuestFileInfo {
  name: string;
  /** Absolute: the directory listed joined with the name, or the path a stat was asked for. */
  path: string;
  type: GuestFileType;
  size_bytes: number;
  /** Permission bits (st_mode & 07777), e.g. 420 for 0644. */
  mode: number;
  /** RFC 3339. */
  modified_at: string;
}

export interface GuestFileStat extends GuestFileInfo {
  uid: number;
  gid: number;
}
