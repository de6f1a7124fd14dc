/**
 * The one interface between the API's unprivileged process and the privileged host process
 * (docs/security.md, "Processes"): every call the API may make, each with the exact shape of its
 * arguments. The host checks each call against its schema before it acts (host-server.ts), so the
 * API cannot widen what it asks for: ids are UUIDs (the host makes every path from them), a VM's
 * TAP must be the one the host gave that runtime, sizes are bounded, and a guest call names a
 * method of the GuestAgent port, never the driver's own (identity, clock, shutdown).
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { VesselError, ERROR_STATUS, type ErrorCode } from '../core/errors.js';
import { LinkError } from '../platform/part-link.js';
import { MAX_TEMPLATE_DISK_BYTES, TEMPLATE_DISK_BLOCK } from '../vm/template-disks.js';

const Uuid = Type.String({ pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' });
const Count = (max: number) => Type.Integer({ minimum: 0, maximum: max });
const MiB = Type.Integer({ minimum: 1, maximum: 4 * 1024 * 1024 });

const Resources = Type.Object(
  {
    limits: Type.Object({ memory_mib: MiB }, { additionalProperties: false }),
    requests: Type.Object({ memory_mib: MiB }, { additionalProperties: false }),
    vcpus: Type.Integer({ minimum: 1, maximum: 1024 }),
  },
  { additionalProperties: false },
);

const VmSpec = Type.Object(
  {
    runtimeId: Uuid,
    resources: Resources,
    fromCheckpointId: Type.Union([Uuid, Type.Null()]),
    templateId: Type.Optional(Type.Union([Uuid, Type.Null()])),
    hostname: Type.String({ pattern: '^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$' }),
    tap: Type.Union([Type.String({ pattern: '^vsl[0-9]{1,5}$' }), Type.Null()]),
    paused: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

const Shape = Type.Object({ memoryMib: MiB, vcpus: Type.Integer({ minimum: 1, maximum: 1024 }) }, { additionalProperties: false });

/**
 * What the gateway enforces for a runtime. Its policy and rules go to the listeners' process,
 * which checks them as it uses them; here only their size is bounded.
 */
const Subject = Type.Object(
  {
    runtimeId: Uuid,
    /** Empty for a warm-pool spare, which belongs to no tenant until a create claims it. */
    tenantId: Type.String({ maxLength: 256 }),
    policy: Type.Unknown(),
    rules: Type.Array(Type.Unknown(), { maxItems: 10_000 }),
  },
  { additionalProperties: false },
);

const Runtime = Type.Object({ runtimeId: Uuid }, { additionalProperties: false });
const Checkpoint = Type.Object({ checkpointId: Uuid }, { additionalProperties: false });
const Stream = Type.Integer({ minimum: 1, maximum: 0x3fff_ffff });
const Ids = Type.Array(Uuid, { maxItems: 1_000_000 });

/** The guest calls the API may relay, and which way each one's stream carries bytes (from the API's side). */
export const GUEST_CALLS = {
  listProcesses: null,
  signalProcess: null,
  resizeTerminal: null,
  forgetProcess: null,
  statPath: null,
  makeDir: null,
  removePath: null,
  spawnProcess: { receives: true, sends: true },
  attachProcess: { receives: true, sends: true },
  readFile: { receives: true, sends: false },
  readArchive: { receives: true, sends: false },
  listDir: { receives: true, sends: false },
  writeFile: { receives: false, sends: true },
  writeArchive: { receives: false, sends: true },
} as const satisfies Record<string, { receives: boolean; sends: boolean } | null>;
export type GuestCall = keyof typeof GUEST_CALLS;

/** Guest arguments go on to the agent's process, which checks each one as it parses it; here only their size is bounded. */
const GuestArgs = Type.Record(Type.String({ maxLength: 32 }), Type.Unknown(), { maxProperties: 16 });

const Pems = Type.Object({ certPem: Type.String({ maxLength: 65536 }), keyPem: Type.String({ maxLength: 65536 }) }, { additionalProperties: false });

export const HOST_CALLS = {
  /**
   * Starts the VMs' driver and the network, once (a restarted API process gets the running ones'
   * facts): with the fleet's egress CA, which a fleet's host reads from the store, or none, and
   * the host keeps its own in the data directory.
   */
  startHost: Type.Object({ egressCa: Type.Union([Pems, Type.Null()]) }, { additionalProperties: false }),
  // Machines
  createTemplate: Type.Object({ checkpointId: Uuid, resources: Resources }, { additionalProperties: false }),
  sweep: Type.Null(),
  create: VmSpec,
  createSpare: VmSpec,
  start: VmSpec,
  pause: Runtime,
  resume: Runtime,
  suspend: Runtime,
  stop: Type.Object({ runtimeId: Uuid, deadlineMs: Count(3_600_000) }, { additionalProperties: false }),
  destroy: Runtime,
  setMemoryTarget: Type.Object({ runtimeId: Uuid, mib: MiB }, { additionalProperties: false }),
  reattach: Runtime,
  readConsoleLog: Type.Object({ runtimeId: Uuid, maxBytes: Count(16 * 1024 * 1024) }, { additionalProperties: false }),
  runtimeIds: Type.Null(),
  // CheckpointFiles
  checkpoint: Type.Object({ runtimeId: Uuid, checkpointId: Uuid }, { additionalProperties: false }),
  captureDisk: Type.Object({ runtimeId: Uuid, checkpointId: Uuid, shape: Shape }, { additionalProperties: false }),
  adoptDisk: Type.Object({ runtimeId: Uuid, checkpointId: Uuid }, { additionalProperties: false }),
  verifyCheckpoint: Checkpoint,
  deleteCheckpoint: Checkpoint,
  heldCheckpointIds: Type.Null(),
  orphanedLayerBytes: Type.Object({ runtimeIds: Ids, checkpointIds: Ids }, { additionalProperties: false }),
  describeCheckpoint: Checkpoint,
  readCheckpointFile: Type.Object({ checkpointId: Uuid, file: Type.String({ pattern: '^[A-Za-z0-9_-]{1,80}$' }), stream: Stream }, { additionalProperties: false }),
  /** The files come from the API on demand: the host calls `openImportFile` with the import's id. */
  importCheckpoint: Type.Object({ checkpointId: Uuid, importId: Count(2 ** 31), description: Type.Object(
      { manifest: Type.Unknown(), image: Type.String({ maxLength: 256 }), files: Type.Array(Type.String({ pattern: '^[A-Za-z0-9_-]{1,80}$' }), { maxItems: 100_000 }) },
      { additionalProperties: false },
    ), expected: Shape }, { additionalProperties: false }),
  // TemplateDisks: the disk's chunks come on the API's stream, each with its offset in its meta.
  importTemplateDisk: Type.Object(
    { templateId: Uuid, sizeBytes: Type.Integer({ minimum: TEMPLATE_DISK_BLOCK, maximum: MAX_TEMPLATE_DISK_BYTES, multipleOf: TEMPLATE_DISK_BLOCK }), stream: Stream },
    { additionalProperties: false },
  ),
  deleteTemplateDisk: Type.Object({ templateId: Uuid }, { additionalProperties: false }),
  // NetworkGateway
  attach: Subject,
  update: Subject,
  detach: Runtime,
  restore: Type.Array(Subject, { maxItems: 100_000 }),
  // GuestAgents
  guestCall: Type.Object({ runtimeId: Uuid, method: Type.String({ maxLength: 32 }), args: GuestArgs }, { additionalProperties: false }),
  guestStream: Type.Object({ runtimeId: Uuid, method: Type.String({ maxLength: 32 }), args: GuestArgs, stream: Stream }, { additionalProperties: false }),
} satisfies Record<string, TSchema>;

export type HostCall = keyof typeof HOST_CALLS;
export type HostArgs<M extends HostCall> = Static<(typeof HOST_CALLS)[M]>;

/** The arguments of `method`, checked; throws invalid_argument naming the first thing wrong. */
export function checkedArgs<M extends HostCall>(method: M, args: unknown): HostArgs<M> {
  const schema = HOST_CALLS[method];
  if (Value.Check(schema, args)) return args as HostArgs<M>;
  const first = Value.Errors(schema, args).First();
  throw new VesselError('invalid_argument', `the host refused ${method}: ${first === undefined ? 'bad arguments' : `${first.path || '/'} ${first.message}`}`);
}

/** A template disk's chunk's meta on the link: its offset in the disk. */
export const chunkOffset = (meta: unknown): unknown => (typeof meta === 'object' && meta !== null && !Array.isArray(meta) ? (meta as { offset?: unknown }).offset : undefined);

/** What the host process sends the API's: the facts that do not change while it runs. */
export interface HostFacts {
  imageId: string;
  /** The gateway's CA certificate (PEM), which templates' guests trust. */
  egressCaPem: string;
  hostLimits: { vcpus: number; memoryMib: number };
  unavailableReason: string | null;
}

/** An error as it crosses the link: the API's error keeps its code and status. */
export function toLinkError(err: unknown): LinkError {
  if (err instanceof LinkError) return err;
  const message = err instanceof Error ? err.message : String(err);
  if (err instanceof VesselError) return new LinkError(message, { kind: 'vessel', code: err.code, httpStatus: err.httpStatus, retryAfterSecs: err.retryAfterSecs ?? null });
  return new LinkError(message, { kind: 'host' });
}

/** The API's error back from the link; anything else is the host failing, as internal. */
export function fromLinkError(err: unknown): Error {
  if (err instanceof VesselError) return err;
  const message = err instanceof Error ? err.message : String(err);
  const d = (err instanceof LinkError && typeof err.detail === 'object' && err.detail !== null ? err.detail : {}) as { kind?: unknown; code?: unknown; httpStatus?: unknown; retryAfterSecs?: unknown };
  if (d.kind === 'vessel' && typeof d.code === 'string' && Object.hasOwn(ERROR_STATUS, d.code)) {
    const code = d.code as ErrorCode;
    const httpStatus = typeof d.httpStatus === 'number' ? d.httpStatus : ERROR_STATUS[code];
    return new VesselError(code, message, typeof d.retryAfterSecs === 'number' ? { httpStatus, retryAfterSecs: d.retryAfterSecs } : { httpStatus });
  }
  return new VesselError('unavailable', `the host process failed: ${message}`);
}
