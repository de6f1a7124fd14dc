/**
 * What every store shares: the columns of each table, domain records to rows and back, and the
 * page tokens. A column added later is added here once; each store then needs only its migration.
 * JSON and timestamps are stored as text in every store, so that one mapping serves all of them.
 */
import { VesselError, invalidArgument } from '../core/errors.js';
import type { Audit, Checkpoint, InjectionRule, NodeRegistration, Page, Runtime, SealedSecret, Secret, Template, TenantLimits, Token, VmNode } from '../core/types.js';

export type Row = Record<string, unknown>;

export const str = (v: unknown): string => v as string;
export const strOrNull = (v: unknown): string | null => (v === null || v === undefined ? null : (v as string));
export const numOrNull = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));
export const json = <T>(v: unknown): T => JSON.parse(v as string) as T;
export const jsonOrNull = <T>(v: unknown): T | null => (v === null || v === undefined ? null : json<T>(v));
/** SQLite stores a flag as 0 or 1, PostgreSQL as a boolean. */
export const flag = (v: unknown): boolean => v === true || v === 1;
/** SQLite stores times as ISO strings; PostgreSQL's timestamptz arrives as a Date. */
export const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : str(v));

export const encodePageToken = (seq: number): string => Buffer.from(`s:${seq}`).toString('base64url');

/**
 * Only a token this store issued is accepted: anything else is invalid_argument, so that a client
 * never takes a mangled token's empty page for the end of the list.
 */
export function decodePageToken(token: string | undefined): number {
  if (token === undefined) return Number.MAX_SAFE_INTEGER;
  const m = /^[A-Za-z0-9_-]{1,64}$/.test(token) ? /^s:(\d{1,15})$/.exec(Buffer.from(token, 'base64url').toString('latin1')) : null;
  if (m === null || encodePageToken(Number(m[1])) !== token) throw invalidArgument('page_token is not a token this service issued');
  return Number(m[1]);
}

export function page<T>(rows: Row[], limit: number, map: (r: Row) => T): Page<T> {
  const more = rows.length > limit;
  const items = (more ? rows.slice(0, limit) : rows).map(map);
  return { items, nextPageToken: more ? encodePageToken(Number(rows[limit - 1]!.seq)) : undefined };
}

export const RUNTIME_COLUMNS = [
  'id', 'tenant_id', 'display_name', 'status', 'status_message', 'egress_policy', 'ingress_specs', 'resources', 'pending_resources', 'base_checkpoint_id',
  'labels', 'idle_timeout_secs', 'on_idle', 'auto_delete_secs', 'stopped_at', 'created_at', 'updated_at', 'node', 'template_id', 'env',
];
export const runtimeToRow = (r: Runtime): Row => ({
  id: r.id,
  tenant_id: r.tenantId,
  display_name: r.displayName,
  status: r.status,
  status_message: r.statusMessage,
  egress_policy: JSON.stringify(r.egressPolicy),
  ingress_specs: JSON.stringify(r.ingressSpecs),
  resources: JSON.stringify(r.resources),
  pending_resources: r.pendingResources === null ? null : JSON.stringify(r.pendingResources),
  base_checkpoint_id: r.baseCheckpointId,
  template_id: r.templateId,
  labels: JSON.stringify(r.labels),
  env: JSON.stringify(r.env),
  idle_timeout_secs: r.lifecycle.idleTimeoutSecs,
  on_idle: r.lifecycle.onIdle,
  auto_delete_secs: r.lifecycle.autoDeleteSecs,
  stopped_at: r.stoppedAt,
  created_at: r.createdAt,
  updated_at: r.updatedAt,
  node: r.node,
});
export const runtimeFromRow = (r: Row): Runtime => ({
  id: str(r.id),
  tenantId: str(r.tenant_id),
  displayName: str(r.display_name),
  status: str(r.status) as Runtime['status'],
  statusMessage: strOrNull(r.status_message),
  egressPolicy: json(r.egress_policy),
  ingressSpecs: json(r.ingress_specs),
  resources: json(r.resources),
  pendingResources: jsonOrNull(r.pending_resources),
  baseCheckpointId: strOrNull(r.base_checkpoint_id),
  templateId: strOrNull(r.template_id),
  labels: json(r.labels),
  env: json(r.env),
  lifecycle: { idleTimeoutSecs: numOrNull(r.idle_timeout_secs), onIdle: str(r.on_idle) as Runtime['lifecycle']['onIdle'], autoDeleteSecs: numOrNull(r.auto_delete_secs) },
  stoppedAt: strOrNull(r.stopped_at),
  createdAt: str(r.created_at),
  updatedAt: str(r.updated_at),
  node: strOrNull(r.node),
});

/** What every reader of the store may see of a secret (a VM host's database role reads these alone). */
export const SECRET_COLUMNS = ['id', 'tenant_id', 'display_name', 'cache_ttl_secs', 'created_at'];
export const SEALED_SECRET_COLUMNS = [...SECRET_COLUMNS, 'sealed_value'];
export const sealedSecretToRow = (s: SealedSecret): Row => ({
  id: s.id,
  tenant_id: s.tenantId,
  display_name: s.displayName,
  cache_ttl_secs: s.cacheTtlSecs,
  created_at: s.createdAt,
  sealed_value: s.sealedValue,
});
export const secretFromRow = (r: Row): Secret => ({
  id: str(r.id),
  tenantId: str(r.tenant_id),
  displayName: str(r.display_name),
  cacheTtlSecs: Number(r.cache_ttl_secs),
  createdAt: str(r.created_at),
});
export const sealedSecretFromRow = (r: Row): SealedSecret => ({ ...secretFromRow(r), sealedValue: str(r.sealed_value) });

export const TEMPLATE_COLUMNS = ['id', 'tenant_id', 'display_name', 'state', 'source', 'failure', 'config', 'disk_bytes', 'checkpoint_id', 'node', 'created_at', 'updated_at'];
export const templateToRow = (t: Template): Row => ({
  id: t.id,
  tenant_id: t.tenantId,
  display_name: t.displayName,
  state: t.state,
  source: JSON.stringify(t.source),
  failure: t.failure === null ? null : JSON.stringify(t.failure),
  config: t.config === null ? null : JSON.stringify(t.config),
  disk_bytes: t.diskBytes,
  checkpoint_id: t.checkpointId,
  node: t.node,
  created_at: t.createdAt,
  updated_at: t.updatedAt,
});
export const templateFromRow = (r: Row): Template => ({
  id: str(r.id),
  tenantId: str(r.tenant_id),
  displayName: str(r.display_name),
  state: str(r.state) as Template['state'],
  source: json(r.source),
  failure: jsonOrNull(r.failure),
  config: jsonOrNull(r.config),
  diskBytes: numOrNull(r.disk_bytes),
  checkpointId: strOrNull(r.checkpoint_id),
  node: strOrNull(r.node),
  createdAt: str(r.created_at),
  updatedAt: str(r.updated_at),
});

export const tokenFromRow = (r: Row): Token => ({
  id: str(r.id),
  tenantId: str(r.tenant_id),
  name: str(r.name),
  hash: str(r.hash),
  scopes: json(r.scopes),
  createdAt: str(r.created_at),
  revokedAt: strOrNull(r.revoked_at),
});

export const ruleFromRow = (r: Row): InjectionRule => ({
  id: str(r.id),
  tenantId: str(r.tenant_id),
  runtimeId: str(r.runtime_id),
  secretId: str(r.secret_id),
  hostPattern: str(r.host_pattern),
  pathPattern: str(r.path_pattern),
  injection: json(r.injection),
  createdAt: str(r.created_at),
});

export const checkpointToRow = (c: Checkpoint): Row => ({
  id: c.id,
  tenant_id: c.tenantId,
  display_name: c.displayName,
  state: c.state,
  state_message: c.stateMessage,
  resources: JSON.stringify(c.resources),
  source_runtime_id: c.sourceRuntimeId,
  parent_checkpoint_id: c.parentCheckpointId,
  template_id: c.templateId,
  deleted: c.deleted ? 1 : 0,
  disk_bytes: c.diskBytes,
  created_at: c.createdAt,
  node: c.node,
});
export const checkpointFromRow = (r: Row): Checkpoint => ({
  id: str(r.id),
  tenantId: strOrNull(r.tenant_id),
  displayName: str(r.display_name),
  state: str(r.state) as Checkpoint['state'],
  stateMessage: strOrNull(r.state_message),
  resources: json(r.resources),
  sourceRuntimeId: strOrNull(r.source_runtime_id),
  parentCheckpointId: strOrNull(r.parent_checkpoint_id),
  templateId: strOrNull(r.template_id),
  deleted: r.deleted === 1,
  diskBytes: numOrNull(r.disk_bytes),
  createdAt: str(r.created_at),
  node: strOrNull(r.node),
});

/** The category tags the payload (its one property), as the store was given both. */
export const auditFromRow = (r: Row): Audit =>
  ({
    id: str(r.id),
    tenantId: str(r.tenant_id),
    runtimeId: str(r.runtime_id),
    category: str(r.category),
    payload: json(r.payload),
    createdAt: str(r.created_at),
  }) as Audit;

export const TOKEN_COLUMNS = ['id', 'tenant_id', 'name', 'hash', 'scopes', 'created_at', 'revoked_at'];
export const tokenToRow = (t: Token): Row => ({
  id: t.id,
  tenant_id: t.tenantId,
  name: t.name,
  hash: t.hash,
  scopes: JSON.stringify(t.scopes),
  created_at: t.createdAt,
  revoked_at: t.revokedAt,
});

export const RULE_COLUMNS = ['id', 'tenant_id', 'runtime_id', 'secret_id', 'host_pattern', 'path_pattern', 'injection', 'created_at'];
export const ruleToRow = (r: InjectionRule): Row => ({
  id: r.id,
  tenant_id: r.tenantId,
  runtime_id: r.runtimeId,
  secret_id: r.secretId,
  host_pattern: r.hostPattern,
  path_pattern: r.pathPattern,
  injection: JSON.stringify(r.injection),
  created_at: r.createdAt,
});

export const CHECKPOINT_COLUMNS = ['id', 'tenant_id', 'display_name', 'state', 'state_message', 'resources', 'source_runtime_id', 'parent_checkpoint_id', 'deleted', 'disk_bytes', 'created_at', 'node', 'template_id'];

export const AUDIT_COLUMNS = ['id', 'tenant_id', 'runtime_id', 'category', 'payload', 'created_at'];
export const auditToRow = (a: Audit): Row => ({
  id: a.id,
  tenant_id: a.tenantId,
  runtime_id: a.runtimeId,
  category: a.category,
  payload: JSON.stringify(a.payload),
  created_at: a.createdAt,
});

/** Columns of tenant_limits, by the limit they hold. */
export const LIMIT_COLUMNS: Record<keyof TenantLimits, string> = {
  runtimes: 'runtimes',
  vcpus: 'vcpus',
  memoryMib: 'memory_mib',
  checkpoints: 'checkpoints',
  checkpointGib: 'checkpoint_gib',
  templates: 'templates',
  templateGib: 'template_gib',
};
export const LIMIT_NAMES = Object.keys(LIMIT_COLUMNS) as Array<keyof TenantLimits>;

/**
 * Columns of nodes that a renewal sets, in this order; the lease, `draining` and `registered_at`
 * are each store's own (its clock; kept across renewals).
 */
export const NODE_REGISTRATION_COLUMNS = ['name', 'holder', 'internal_url', 'ingress_address', 'memory_mib', 'vcpus', 'runtimes', 'disk_bytes'];
export const nodeRegistrationToRow = (n: NodeRegistration): Row => ({
  name: n.name,
  holder: n.holder,
  internal_url: n.internalUrl,
  ingress_address: n.ingressAddress,
  memory_mib: n.capacity.memoryMib,
  vcpus: n.capacity.vcpus,
  runtimes: n.capacity.runtimes,
  disk_bytes: n.capacity.diskBytes,
});
/** `alive` is the store's to judge, by the clock it keeps leases on. */
export const nodeFromRow = (r: Row, alive: boolean): VmNode => ({
  name: str(r.name),
  // Empty for a host registered before version 6 that has not renewed since.
  holder: strOrNull(r.holder) ?? '',
  internalUrl: str(r.internal_url),
  ingressAddress: strOrNull(r.ingress_address),
  capacity: { memoryMib: Number(r.memory_mib), vcpus: Number(r.vcpus), runtimes: Number(r.runtimes), diskBytes: Number(r.disk_bytes) },
  draining: flag(r.draining),
  alive,
  leaseExpiresAt: iso(r.lease_expires_at),
  registeredAt: iso(r.registered_at),
});

/** A renewal under a name that another host holds, while that host's lease runs. */
export const nameHeld = (name: string, until: string): VesselError =>
  new VesselError(
    'failed_precondition',
    `VM host name '${name}' is held by another host (another data directory) whose lease runs until ${until}: give each VM host its own VESSEL_NODE_NAME`,
  );

/** A lease is a whole or fractional number of seconds, none below zero (zero: expired at once). */
export function checkLeaseSecs(leaseSecs: number): void {
  if (!Number.isFinite(leaseSecs) || leaseSecs < 0) throw new RangeError(`a lease of ${leaseSecs} s`);
}

/** Where a VM host's enrollment is kept among the fleet's settings (`fleet_settings`). */
export const credentialKey = (node: string): string => `node-credential:${node}`;
