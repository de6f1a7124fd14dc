/** Domain records. Value objects that the spec defines (resources, egress policy, ingress) keep its field names. */

export const RUNTIME_STATUSES = ['running', 'paused', 'shutdown', 'creating', 'deleting', 'error', 'crashed', 'suspended'] as const;
export type RuntimeStatus = (typeof RUNTIME_STATUSES)[number];

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
  createdAt: string;
  updatedAt: string;
}

export interface Secret {
  id: string;
  tenantId: string;
  displayName: string;
  cacheTtlSecs: number;
  /** AES-256-GCM sealed value; never leaves the core unsealed except towards the egress gateway. */
  sealedValue: string;
  createdAt: string;
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
  /** The checkpoint whose disk layer this one's layer sits on. */
  parentCheckpointId: string | null;
  /** Hidden from users (deleted) but kept while forks still need its files. */
  deleted: boolean;
  /** Disk space its files take, known once it is ready; null before, and for checkpoints captured before it was measured. */
  diskBytes: number | null;
  createdAt: string;
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
}

/** What a tenant holds, counted as its limits are. */
export interface TenantUsage {
  runtimes: number;
  vcpus: number;
  memoryMib: number;
  checkpoints: number;
  checkpointBytes: number;
}

export type EgressAuditKind = 'tcp_connection' | 'http_request' | 'icmp_drop';

/** Fields per DESIGN.md: action, host, ip, port, reason, and for HTTP method, path, status, rule_ids. */
export interface EgressAuditDetail {
  action: 'allow' | 'deny';
  [field: string]: unknown;
}

export interface Audit {
  id: string;
  tenantId: string;
  runtimeId: string;
  category: 'egress';
  payload: { egress: { kind: EgressAuditKind } & Partial<Record<EgressAuditKind, EgressAuditDetail>> };
  createdAt: string;
}

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
