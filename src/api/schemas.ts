/**
 * Every schema of the API, once. Fastify compiles them for validation and serialization, the
 * handlers get their TypeScript types from them, and @fastify/swagger builds the OpenAPI document
 * from the same objects.
 */
import { Type, type Static, type TSchema } from '@sinclair/typebox';
import { ERROR_CODES } from '../core/errors.js';
import { SIGNAL_NAMES } from '../core/processes.js';
import { RUNTIME_STATUSES, CHECKPOINT_STATES, GUEST_FILE_TYPES } from '../core/types.js';

/** OpenAPI 3.0.3 has no `type: null`; ajv and swagger both understand `nullable`. */
const Nullable = <T extends TSchema>(schema: T) => Type.Unsafe<Static<T> | null>({ ...schema, nullable: true });

/** A string enum that OpenAPI shows as `enum` and TypeScript sees as a union of literals. */
const StringEnum = <T extends string>(values: readonly T[], extra: object = {}) => Type.Unsafe<T>({ type: 'string', enum: [...values], ...extra });

const MemoryMib = Type.Integer({ minimum: 1, description: 'MiB (uint64)' });
const Vcpus = Type.Integer({ minimum: 1, maximum: 2147483647 });

export const ErrorEnvelope = Type.Object(
  {
    error: Type.Object({
      code: StringEnum(ERROR_CODES),
      message: Type.String(),
    }),
  },
  { $id: 'ErrorEnvelope' },
);

export const Resources = Type.Object(
  {
    limits: Type.Object({ memory_mib: MemoryMib }),
    requests: Type.Object({ memory_mib: MemoryMib }),
    vcpus: Vcpus,
  },
  { $id: 'Resources' },
);

export const EgressPolicy = Type.Object(
  {
    allowed_hosts: Type.Array(Type.String({ maxLength: 260 }), { maxItems: 128 }),
    enabled: Type.Boolean(),
  },
  { $id: 'EgressPolicy', additionalProperties: false },
);

export const IngressSpec = Type.Object(
  {
    protocol: StringEnum(['http', 'https'] as const),
    runtime_port: Type.Integer({ minimum: 0, maximum: 65535 }),
  },
  { $id: 'IngressSpec', additionalProperties: false },
);

export const Runtime = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    display_name: Type.String(),
    status: StringEnum(RUNTIME_STATUSES),
    status_message: Type.Optional(Type.String()),
    egress_policy: Type.Ref(EgressPolicy),
    ingress_specs: Type.Array(Type.Ref(IngressSpec)),
    resources: Type.Ref(Resources),
    pending_resources: Type.Optional(Type.Ref(Resources)),
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Runtime' },
);

export const Secret = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    display_name: Type.String(),
    cache_ttl_secs: Type.Integer({ minimum: 0, maximum: 4294967295 }),
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Secret' },
);

export const InjectionConfig = Type.Object(
  {
    headerName: Type.String({ minLength: 1, maxLength: 256 }),
    valueFormat: Type.Optional(Type.String({ maxLength: 8192 })),
    paramName: Type.Optional(Type.String({ minLength: 1, maxLength: 256 })),
    paramFormat: Type.Optional(Type.String({ maxLength: 8192 })),
    value: Type.Optional(Type.String({ maxLength: 8192 })),
  },
  { $id: 'InjectionConfig', additionalProperties: true },
);

export const SecretInjectionRule = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    credential_display_name: Type.String(),
    host_pattern: Type.String(),
    path_pattern: Type.String(),
    injection_config_json: Type.String(),
    runtime_display_name: Type.String(),
  },
  { $id: 'SecretInjectionRule' },
);

export const Checkpoint = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    display_name: Type.String(),
    state: StringEnum(CHECKPOINT_STATES),
    state_message: Type.Optional(Type.String()),
    resources: Type.Ref(Resources),
    system: Type.Boolean(),
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Checkpoint' },
);

export const ExecResult = Type.Object(
  {
    exit_code: Type.Integer(),
    duration_ms: Type.Integer({ minimum: 0 }),
    stdout: Type.String(),
    stdout_truncated: Type.Boolean(),
    stderr: Type.String(),
    stderr_truncated: Type.Boolean(),
  },
  { $id: 'ExecResult' },
);

export const Audit = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    created_at: Type.String({ format: 'date-time' }),
    runtime_id: Type.String({ format: 'uuid' }),
    category: StringEnum(['egress'] as const),
    payload: Type.Object(
      {
        egress: Type.Object(
          {
            kind: StringEnum(['tcp_connection', 'http_request', 'icmp_drop'] as const),
            tcp_connection: Type.Optional(Type.Object({ action: Type.String() }, { additionalProperties: true })),
            http_request: Type.Optional(Type.Object({ action: Type.String() }, { additionalProperties: true })),
            icmp_drop: Type.Optional(Type.Object({ action: Type.String() }, { additionalProperties: true })),
          },
          { additionalProperties: false },
        ),
      },
      { additionalProperties: false },
    ),
  },
  { $id: 'Audit' },
);

export const FileWritten = Type.Object({ path: Type.String(), size_bytes: Type.Integer({ minimum: 0 }) }, { $id: 'FileWritten' });

const FileInfoFields = {
  name: Type.String({ description: "the last component of the path ('/' for the root)" }),
  path: Type.String({ description: 'absolute path inside the runtime' }),
  type: StringEnum(GUEST_FILE_TYPES),
  size_bytes: Type.Integer({ minimum: 0, description: "for a symbolic link, the length of its target's name" }),
  mode: Type.Integer({ minimum: 0, maximum: 0o7777, description: 'permission bits (st_mode & 07777) as a number: 420 is 0644' }),
  modified_at: Type.String({ format: 'date-time' }),
};
export const FileInfo = Type.Object(FileInfoFields, { $id: 'FileInfo' });
export const FileStat = Type.Object(
  { ...FileInfoFields, uid: Type.Integer({ minimum: 0 }), gid: Type.Integer({ minimum: 0 }) },
  { $id: 'FileStat' },
);
export const Health = Type.Object({ status: Type.String() }, { $id: 'Health' });

/** Every named schema, registered with Fastify so `$ref`s resolve and OpenAPI lists them as components. */
const OutputRange = Type.Object(
  {
    start: Type.Integer({ minimum: 0, description: 'offset of the oldest byte the ring still holds' }),
    end: Type.Integer({ minimum: 0, description: 'bytes the channel produced in all' }),
  },
  { additionalProperties: false },
);

export const Process = Type.Object(
  {
    id: Type.Integer({ minimum: 1, description: "the guest agent's id, never reused while the runtime runs" }),
    pid: Type.Integer({ description: 'the pid in the guest' }),
    command: Type.String({ description: 'argv joined by spaces, at most 256 bytes' }),
    status: StringEnum(['running', 'exited', 'signaled'] as const),
    exit_code: Nullable(Type.Integer({ description: 'the exit status, or 128 + n when signal n ended it; null while running' })),
    signal: Nullable(Type.Integer({ description: 'the signal that ended it' })),
    pty: Type.Boolean(),
    stdin_open: Type.Boolean(),
    started_at: Type.String({ format: 'date-time' }),
    ended_at: Nullable(Type.String({ format: 'date-time' })),
    stdout: OutputRange,
    stderr: OutputRange,
  },
  { $id: 'Process', additionalProperties: false },
);

export const SHARED_SCHEMAS = [ErrorEnvelope, Resources, EgressPolicy, IngressSpec, Runtime, Secret, InjectionConfig, SecretInjectionRule, Checkpoint, ExecResult, Process, Audit, FileWritten, FileInfo, FileStat, Health];

// ---- requests ----

export const RuntimeCreateBody = Type.Object(
  {
    display_name: Type.String({ minLength: 1, maxLength: 128 }),
    resources: Type.Optional(
      Type.Object(
        {
          limits: Type.Optional(Type.Object({ memory_mib: MemoryMib }, { additionalProperties: false })),
          requests: Type.Optional(Type.Object({ memory_mib: Type.Optional(MemoryMib) }, { additionalProperties: false })),
          vcpus: Type.Optional(Vcpus),
        },
        { additionalProperties: false },
      ),
    ),
    egress_policy: Type.Optional(Type.Ref(EgressPolicy)),
    ingress_specs: Type.Optional(Type.Array(Type.Ref(IngressSpec), { maxItems: 64 })),
    checkpoint: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'checkpoint ID or name to fork from' })),
  },
  { additionalProperties: false },
);

export const RuntimePatchBody = Type.Object(
  {
    egress_policy: Type.Optional(Type.Ref(EgressPolicy)),
    resources: Type.Optional(
      Type.Object(
        {
          limits: Type.Optional(Type.Object({ memory_mib: MemoryMib }, { additionalProperties: false })),
          requests: Type.Optional(Type.Object({ memory_mib: Type.Optional(MemoryMib) }, { additionalProperties: false })),
        },
        { additionalProperties: false },
      ),
    ),
  },
  { additionalProperties: false },
);

export const MAX_OUTPUT_BYTES = 4194304;

export const ExecBody = Type.Object(
  {
    command: Type.String({ minLength: 1, maxLength: 131072 }),
    args: Type.Optional(Type.Array(Type.String({ maxLength: 131072 }), { maxItems: 4096 })),
    cwd: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 4096 }))),
    env: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 131072 }))),
    stdin: Type.Optional(Nullable(Type.String())),
    max_output_bytes: Type.Optional(Nullable(Type.Integer({ minimum: 0, maximum: MAX_OUTPUT_BYTES }))),
    timeout_secs: Type.Optional(Nullable(Type.Integer({ minimum: 1 }))),
    background: Type.Optional(
      Type.Boolean({ description: 'streaming only: when the client disconnects, the command runs on as a background process instead of being killed' }),
    ),
  },
  { additionalProperties: false },
);

const TerminalSize = {
  rows: Type.Integer({ minimum: 1, maximum: 1000 }),
  cols: Type.Integer({ minimum: 1, maximum: 1000 }),
};

export const ProcessCreateBody = Type.Object(
  {
    command: ExecBody.properties.command,
    args: ExecBody.properties.args,
    cwd: ExecBody.properties.cwd,
    env: ExecBody.properties.env,
    pty: Type.Optional(Nullable(Type.Object(TerminalSize, { additionalProperties: false, description: 'run on a terminal of this size; stdout then carries all it shows' }))),
    stdin: Type.Optional(Type.Boolean({ description: 'keep stdin open for POST .../stdin (a terminal always takes input)' })),
    ring_bytes: Type.Optional(Type.Integer({ minimum: 4096, maximum: 4194304, description: 'output kept per channel for readers (default 1 MiB)' })),
  },
  { additionalProperties: false },
);

export const ProcessParams = Type.Object({ runtime_id: Type.String(), process_id: Type.Integer({ minimum: 1, maximum: 4294967295 }) });

export const OutputQuery = Type.Object({
  since: Type.Optional(
    Type.String({
      pattern: '^[0-9]{1,15}(,[0-9]{1,15})?$',
      description: 'where to resume: the stdout offset, or "stdout,stderr" offsets (an event\'s id); default: the oldest byte kept',
    }),
  ),
  follow: Type.Optional(Type.Boolean({ default: true, description: 'stream until the process exits; false: stop at what exists now' })),
});

export const StdinQuery = Type.Object({ eof: Type.Optional(Type.Boolean({ default: false, description: 'close stdin after these bytes' })) });

export const SignalBody = Type.Object(
  {
    signal: StringEnum(SIGNAL_NAMES),
    tree: Type.Optional(Type.Boolean({ default: true, description: 'also every descendant, including those that left its process group' })),
  },
  { additionalProperties: false },
);

export const TerminalQuery = Type.Object({
  rows: Type.Optional(Type.Integer({ ...TerminalSize.rows, default: 24 })),
  cols: Type.Optional(Type.Integer({ ...TerminalSize.cols, default: 80 })),
  process_id: Type.Optional(Type.Integer({ minimum: 1, maximum: 4294967295, description: 'attach to this pty process instead of starting a login shell' })),
});

export const SecretCreateBody = Type.Object(
  {
    name: Type.String({ minLength: 1, maxLength: 128 }),
    value: Type.String(),
    cache_ttl_secs: Type.Optional(Type.Integer({ minimum: 0, maximum: 4294967295 })),
  },
  { additionalProperties: false },
);

export const RuleCreateBody = Type.Object(
  {
    host: Type.String({ minLength: 1, maxLength: 260 }),
    injection: Type.Ref(InjectionConfig),
    path: Type.Optional(Nullable(Type.String({ maxLength: 1024 }))),
    secret: Type.String({ minLength: 1, maxLength: 128 }),
  },
  { additionalProperties: false },
);

export const CheckpointCreateBody = Type.Object(
  {
    kind: Type.Optional(Type.String({ description: "only 'full' is supported" })),
    name: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  },
  { additionalProperties: false },
);

export const ListQuery = Type.Object({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
  page_token: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{1,256}$', description: 'next_page_token of the previous page' })),
});

export const CheckpointListQuery = Type.Composite([ListQuery, Type.Object({ include_system: Type.Optional(Type.Boolean()) })]);

export const AuditQuery = Type.Object({
  category: Type.Optional(StringEnum(['egress'] as const)),
  runtime: Type.Optional(Type.String({ minLength: 1, maxLength: 128 })),
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000, default: 100 })),
});

export const FileQuery = Type.Object({ path: Type.String({ minLength: 1, maxLength: 4096 }) });
export const StatQuery = Type.Composite([
  FileQuery,
  Type.Object({ follow_symlinks: Type.Optional(Type.Boolean({ default: true, description: 'false describes a symbolic link itself' })) }),
]);
export const RemoveQuery = Type.Composite([
  FileQuery,
  Type.Object({ recursive: Type.Optional(Type.Boolean({ default: false, description: 'remove a directory with everything in it' })) }),
]);

export const RuntimeParams = Type.Object({ runtime_id: Type.String() });
export const SecretParams = Type.Object({ secret_id: Type.String() });
export const CheckpointParams = Type.Object({ checkpoint_id: Type.String() });
export const RuleParams = Type.Object({ rule_id: Type.String() });
export const RuntimeRuleParams = Type.Object({ runtime_id: Type.String(), rule_id: Type.String() });

// ---- envelopes ----

export const DataOf = <T extends TSchema>(schema: T) => Type.Object({ data: schema });
export const ListOf = <T extends TSchema>(schema: T) =>
  Type.Object({ data: Type.Array(schema), next_page_token: Type.Optional(Type.String()) });
export const Empty = Type.Object({ data: Type.Object({}) });
