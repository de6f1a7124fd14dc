/**
 * Every schema of the API, once. Fastify compiles them for validation and serialization, the
 * handlers get their TypeScript types from them, and @fastify/swagger builds the OpenAPI document
 * from the same objects.
 */
import { Type, type IntegerOptions, type Static, type TSchema } from '@sinclair/typebox';
import { ERROR_CODES } from '../core/errors.js';
import { DEFAULT_RING_BYTES, MAX_RING_BYTES, MIN_RING_BYTES, SIGNAL_NAMES } from '../core/processes.js';
import { MAX_SECRET_BYTES } from '../core/secrets.js';
import { DEFAULT_READY_TIMEOUT_SECS, MAX_READY_CMD_BYTES, MAX_READY_TIMEOUT_SECS } from '../core/templates.js';
import { ENV_NAME_PATTERN, LABEL_KEY_PATTERN, MAX_ENV_BYTES, MAX_ENV_VARS, MAX_LABEL_SELECTORS, MAX_LABEL_VALUE_CHARS, MAX_LABELS, MAX_LIFECYCLE_SECS } from '../core/runtime-settings.js';
import { AUDIT_CATEGORIES, SHOWN_RUNTIME_STATUSES, CHECKPOINT_STATES, GUEST_FILE_TYPES, SCOPES, TEMPLATE_STATES } from '../core/types.js';
import { DEFAULT_CONSOLE_LOG_BYTES, MAX_CONSOLE_LOG_BYTES } from '../core/console-log.js';

/** OpenAPI 3.0.3 has no `type: null`; ajv and swagger both understand `nullable`. */
export const Nullable = <T extends TSchema>(schema: T) => Type.Unsafe<Static<T> | null>({ ...schema, nullable: true });

/** A string enum that OpenAPI shows as `enum` and TypeScript sees as a union of literals. */
const StringEnum = <T extends string>(values: readonly T[], extra: object = {}) => Type.Unsafe<T>({ type: 'string', enum: [...values], ...extra });

/**
 * Integers carry their OpenAPI format, so that generators pick a type wide enough: int32 where
 * every allowed value fits in 32 signed bits, int64 otherwise (uint32 and uint64 of the spec).
 * test/api/openapi.test.ts checks that the bounds agree with the format.
 */
export const Int32 = (options: IntegerOptions = {}) => Type.Integer({ format: 'int32', ...options });
export const Int64 = (options: IntegerOptions = {}) => Type.Integer({ format: 'int64', ...options });

const MemoryMib = Int64({ minimum: 1, description: 'MiB (uint64)' });
const Vcpus = Int32({ minimum: 1, maximum: 2147483647, description: 'virtual CPUs' });
/** What a display name may be (docs/api.md, "Identifiers"); the core checks its pattern. */
const DisplayName = (description: string) => Type.String({ minLength: 1, maxLength: 128, description });

export const ErrorEnvelope = Type.Object(
  {
    error: Type.Object({
      code: StringEnum(ERROR_CODES, { description: 'what went wrong, as one of the error codes' }),
      message: Type.String({ description: 'for people: what went wrong with this request; never a secret value' }),
    }),
  },
  { $id: 'ErrorEnvelope', description: 'The body of every error response' },
);

export const Resources = Type.Object(
  {
    limits: Type.Object({ memory_mib: MemoryMib }, { description: 'the most memory the VM may have' }),
    requests: Type.Object({ memory_mib: MemoryMib }, { description: 'the memory the VM is asked to keep (virtio balloon target)' }),
    vcpus: Vcpus,
  },
  { $id: 'Resources' },
);

export const EgressPolicy = Type.Object(
  {
    allowed_hosts: Type.Array(Type.String({ maxLength: 260 }), { maxItems: 128, description: 'host names or patterns (`*.example.com`, `*`) the runtime may reach' }),
    enabled: Type.Boolean({ description: 'false passes traffic through uninspected, unaudited and without injection' }),
  },
  { $id: 'EgressPolicy', additionalProperties: false },
);

export const IngressSpec = Type.Object(
  {
    protocol: StringEnum(['http', 'https'] as const),
    runtime_port: Int32({ minimum: 1, maximum: 65535, description: 'the port inside the runtime (uint16; 0 is refused)' }),
  },
  { $id: 'IngressSpec', additionalProperties: false },
);

export const Labels = Type.Record(Type.String(), Type.String({ maxLength: MAX_LABEL_VALUE_CHARS }), {
  $id: 'Labels',
  maxProperties: MAX_LABELS,
  description: `your own tags: at most ${MAX_LABELS}; keys match ${LABEL_KEY_PATTERN} (1 to 63 characters), values have at most ${MAX_LABEL_VALUE_CHARS} characters and no control characters`,
});

const LifecycleSecs = (description: string) => Nullable(Int64({ minimum: 0, maximum: MAX_LIFECYCLE_SECS, description }));
const LifecycleFields = {
  idle_timeout_secs: LifecycleSecs('seconds without exec, file, terminal or egress activity before on_idle applies; null: the service default (VESSEL_IDLE_SUSPEND_SECS); 0: never'),
  on_idle: StringEnum(['suspend', 'stop'] as const, { description: 'suspend: saved to disk, resume brings back its processes; stop: shut down, start boots it' }),
  auto_delete_secs: LifecycleSecs('seconds after the runtime stopped running (shutdown, suspended, crashed, error) before it is deleted; null: never'),
};

export const Lifecycle = Type.Object(LifecycleFields, { $id: 'Lifecycle', additionalProperties: false, description: 'what the runtime does on its own when left alone' });

/** In a create or PATCH: each field given replaces the one in force, the others stay. */
const LifecycleInput = Type.Object(
  {
    idle_timeout_secs: Type.Optional(LifecycleFields.idle_timeout_secs),
    on_idle: Type.Optional(LifecycleFields.on_idle),
    auto_delete_secs: Type.Optional(LifecycleFields.auto_delete_secs),
  },
  { additionalProperties: false, description: 'fields given replace those in force; a create starts from idle_timeout_secs null, on_idle suspend, auto_delete_secs null' },
);

export const IngressUrl = Type.Object(
  {
    runtime_port: IngressSpec.properties.runtime_port,
    protocol: IngressSpec.properties.protocol,
    url: Type.String({ format: 'uri', description: 'where the port is reached from outside, through the ingress listener' }),
  },
  { $id: 'IngressUrl', additionalProperties: false },
);

export const Runtime = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    display_name: Type.String(),
    status: StringEnum(SHOWN_RUNTIME_STATUSES, {
      description: "`unavailable`: the VM host that runs it (in a fleet of hosts) has lost its lease; status_message says which and since when. Never stored: the runtime reads its real status again once the host is back",
    }),
    status_message: Type.Optional(Type.String({ description: 'why the runtime is in error, crashed or unavailable' })),
    egress_policy: Type.Ref(EgressPolicy),
    ingress_specs: Type.Array(Type.Ref(IngressSpec)),
    resources: Type.Ref(Resources),
    pending_resources: Type.Optional(Type.Ref(Resources)),
    labels: Type.Ref(Labels),
    env_names: Type.Array(Type.String(), { description: "the names of the environment variables set at create (their values may be secrets and are not shown)" }),
    lifecycle: Type.Ref(Lifecycle),
    ingress_urls: Type.Array(Type.Ref(IngressUrl), { description: 'one per ingress spec, in their order; empty when the service runs no ingress' }),
    template_id: Type.Optional(Type.String({ format: 'uuid', description: 'the template it was created from; absent for the built-in image' })),
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Runtime' },
);

const CacheTtlSecs = Int64({ minimum: 0, maximum: 4294967295, description: 'how long the gateway may keep the value in memory, in seconds (uint32)' });

export const Secret = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    display_name: Type.String(),
    cache_ttl_secs: CacheTtlSecs,
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Secret', description: 'A stored secret; its value is never returned' },
);

export const InjectionConfig = Type.Object(
  {
    headerName: Type.String({ minLength: 1, maxLength: 256, description: 'the request header to set' }),
    valueFormat: Type.Optional(Type.String({ maxLength: 8192, description: 'the header value; `${credential}` and `{value}` stand for the secret' })),
    paramName: Type.Optional(Type.String({ minLength: 1, maxLength: 256, description: 'a query parameter to set as well' })),
    paramFormat: Type.Optional(Type.String({ maxLength: 8192, description: 'the query parameter value, as valueFormat' })),
    value: Type.Optional(Type.String({ maxLength: 8192, description: 'the template used when valueFormat or paramFormat is absent' })),
  },
  { $id: 'InjectionConfig', additionalProperties: true },
);

export const SecretInjectionRule = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    credential_display_name: Type.String(),
    host_pattern: Type.String(),
    path_pattern: Type.String(),
    injection_config_json: Type.String({ description: 'the injection configuration, as JSON text' }),
    runtime_display_name: Type.String(),
  },
  { $id: 'SecretInjectionRule' },
);

export const Checkpoint = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    display_name: Type.String(),
    state: StringEnum(CHECKPOINT_STATES),
    state_message: Type.Optional(Type.String({ description: 'why the capture failed' })),
    resources: Type.Ref(Resources),
    system: Type.Boolean({ description: "true for the service's own templates, which cannot be deleted" }),
    source_runtime_id: Nullable(Type.String({ format: 'uuid', description: 'the runtime it was captured from (which may since have been deleted); null for system checkpoints' })),
    created_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Checkpoint' },
);

/** Inline where used: OpenAPI 3.0's `nullable` cannot sit beside a `$ref`. */
const TemplateFailure = Type.Object(
  {
    step: Type.String({ description: 'the step that failed, as the build log names it' }),
    exit_code: Nullable(Int32({ description: "its command's exit status; null when the step ran no command" })),
    output_tail: Type.String({ description: "the last 4 KiB of the step's output, its error last" }),
  },
  { description: 'why the build failed' },
);

const TemplateConfig = Type.Object(
  {
    env: Type.Record(Type.String(), Type.String(), { description: "the image's ENV" }),
    workdir: Nullable(Type.String()),
    user: Nullable(Type.String()),
    entrypoint: Nullable(Type.Array(Type.String())),
    cmd: Nullable(Type.Array(Type.String())),
  },
  { description: "what the image's config sets: the defaults of a runtime's commands, and its start command" },
);

export const Template = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    display_name: Type.String(),
    state: StringEnum(TEMPLATE_STATES),
    source: Type.Union([
      Type.Object({ image: Type.String(), registry_secret_id: Nullable(Type.String({ format: 'uuid' })) }, { additionalProperties: false }),
      Type.Object({ archive_bytes: Int64({ minimum: 0 }) }, { additionalProperties: false }),
      Type.Object({
        dockerfile: Type.String({ description: "the Dockerfile's path in the build context" }),
        context_bytes: Int64({ minimum: 0, description: 'the uploaded build context' }),
        build_args: Type.Record(Type.String(), Type.String()),
        egress_policy: Type.Ref(EgressPolicy),
      }, { additionalProperties: false }),
    ], { description: 'a registry image, an uploaded archive, or a Dockerfile with its build context' }),
    failure: Nullable(TemplateFailure),
    config: Nullable(TemplateConfig),
    disk_bytes: Nullable(Int64({ minimum: 0, description: 'the root disk, once ready' })),
    created_at: Type.String({ format: 'date-time' }),
    updated_at: Type.String({ format: 'date-time' }),
  },
  { $id: 'Template' },
);

export const ExecResult = Type.Object(
  {
    exit_code: Int32({ description: 'the exit status, or 128 + n when signal n ended the command' }),
    duration_ms: Int64({ minimum: 0 }),
    stdout: Type.String({ description: 'UTF-8, invalid bytes as U+FFFD' }),
    stdout_truncated: Type.Boolean(),
    stderr: Type.String({ description: 'UTF-8, invalid bytes as U+FFFD' }),
    stderr_truncated: Type.Boolean(),
  },
  { $id: 'ExecResult' },
);

// ---- audits: what the gateway records of each kind (src/net) ----
// Field for field: the serializer drops what a schema does not name, so
// test/unit/net-egress.test.ts holds the gateway's real audits to these.

const EgressAction = StringEnum(['allow', 'deny'] as const, { description: 'whether the gateway let it through' });
const Port = Int32({ minimum: 0, maximum: 65535 });
/** Fields an audit cut to 1024 characters (docs/api.md, "Audits"). */
const Truncated = Type.Optional(Type.Array(Type.String(), { description: 'the fields cut to their first 1024 characters' }));

export const TcpConnectionAudit = Type.Object(
  {
    action: EgressAction,
    host: Nullable(Type.String({ description: 'the name decided on (SNI, or the name the gateway resolved to this address); null when none' })),
    ip: Nullable(Type.String({ description: 'the address dialed, or the one the guest aimed at; null when none was chosen' })),
    port: Port,
    reason: Type.String({
      description:
        'allowed: host_allowed, intercepted_for_injection, address_pinned_by_dns; denied: host_not_allowed, private_address, unresolvable, not_resolved_by_gateway, no_host, bad_request, connection_limit',
    }),
    truncated: Truncated,
  },
  { $id: 'TcpConnectionAudit', additionalProperties: false, description: 'A connection the guest opened' },
);

export const HttpRequestAudit = Type.Object(
  {
    action: EgressAction,
    host: Nullable(Type.String({ description: 'the Host (or, for a request that could not be read, the SNI)' })),
    ip: Nullable(Type.String({ description: 'the address dialed; null when denied' })),
    port: Port,
    method: Type.Optional(Type.String()),
    path: Type.Optional(Type.String({ description: 'without the query string' })),
    status: Int32({ minimum: 100, maximum: 999, description: 'the status the guest got' }),
    reason: Type.String({
      description:
        'allowed: host_allowed, or `upstream_error: <code>` when the upstream failed (status 502); denied: host_not_allowed, private_address, unresolvable, no_host, sni_host_mismatch, bad_request, method_not_allowed',
    }),
    rule_ids: Type.Optional(Type.Array(Type.String({ format: 'uuid' }), { description: 'the secret injection rules that injected into the request' })),
    truncated: Truncated,
  },
  { $id: 'HttpRequestAudit', additionalProperties: false, description: 'An HTTP request the gateway read (plain HTTP, or HTTPS intercepted for injection)' },
);

export const IcmpDropAudit = Type.Object(
  {
    action: EgressAction,
    host: Nullable(Type.String({ enum: [null], description: 'always null' })),
    ip: Nullable(Type.String({ enum: [null], description: 'always null' })),
    port: Nullable(Int32({ enum: [null], description: 'always null' })),
    reason: StringEnum(['icmp_dropped'] as const),
    count: Int64({ minimum: 1, description: 'ICMP packets dropped since the previous icmp_drop audit of the runtime' }),
  },
  { $id: 'IcmpDropAudit', additionalProperties: false, description: 'ICMP packets the gateway dropped, counted over an interval; action is always deny' },
);

export const LifecycleAudit = Type.Object(
  {
    action: StringEnum(['suspend', 'stop', 'delete', 'move'] as const, { description: 'what the timer did, or move: the runtime moved to another VM host of the fleet' }),
    reason: Type.String({ description: 'which setting, and after how long; for a move, from which host to which' }),
    runtime_name: Type.String({ description: "the runtime's display name when it acted (a deleted runtime has no other)" }),
  },
  { $id: 'LifecycleAudit', additionalProperties: false, description: "What happened to a runtime with no request of its tenant asking: its lifecycle settings' actions, and moves between VM hosts" },
);

export const Audit = Type.Object(
  {
    id: Type.String({ format: 'uuid' }),
    created_at: Type.String({ format: 'date-time' }),
    runtime_id: Type.String({ format: 'uuid' }),
    category: StringEnum(AUDIT_CATEGORIES, { description: 'names the one property of payload that is present' }),
    payload: Type.Object(
      {
        lifecycle: Type.Optional(Type.Ref(LifecycleAudit)),
        egress: Type.Optional(Type.Object(
          {
            kind: StringEnum(['tcp_connection', 'http_request', 'icmp_drop'] as const, { description: 'names the one property below that is present' }),
            tcp_connection: Type.Optional(Type.Ref(TcpConnectionAudit)),
            http_request: Type.Optional(Type.Ref(HttpRequestAudit)),
            icmp_drop: Type.Optional(Type.Ref(IcmpDropAudit)),
          },
          { additionalProperties: false },
        )),
      },
      { additionalProperties: false, description: 'externally tagged by category: exactly one property, the category' },
    ),
  },
  { $id: 'Audit' },
);

export const FileWritten = Type.Object(
  { path: Type.String(), size_bytes: Int64({ minimum: 0, description: 'the bytes taken from the request body' }) },
  { $id: 'FileWritten' },
);

const FileInfoFields = {
  name: Type.String({ description: "the last component of the path ('/' for the root)" }),
  path: Type.String({ description: 'absolute path inside the runtime' }),
  type: StringEnum(GUEST_FILE_TYPES),
  size_bytes: Int64({ minimum: 0, description: "for a symbolic link, the length of its target's name" }),
  mode: Int32({ minimum: 0, maximum: 0o7777, description: 'permission bits (st_mode & 07777) as a number: 420 is 0644' }),
  modified_at: Type.String({ format: 'date-time' }),
};
export const FileInfo = Type.Object(FileInfoFields, { $id: 'FileInfo' });
export const FileStat = Type.Object(
  { ...FileInfoFields, uid: Int64({ minimum: 0, maximum: 4294967295 }), gid: Int64({ minimum: 0, maximum: 4294967295 }) },
  { $id: 'FileStat' },
);
export const Health = Type.Object({ status: StringEnum(['ok'] as const) }, { $id: 'Health' });

// ---- tokens and console logs (docs/api.md, "Tokens", "Console log") ----

const TokenFields = {
  id: Type.String({ format: 'uuid' }),
  tenant: Type.String({ description: 'the tenant the token acts for' }),
  name: Type.String({ description: 'a label; not unique' }),
  scopes: Type.Array(StringEnum(SCOPES), { description: 'what the token may do; admin is all of it, and token management' }),
  created_at: Type.String({ format: 'date-time' }),
  revoked_at: Nullable(Type.String({ format: 'date-time', description: 'when it was revoked; null while it is valid' })),
};

export const Token = Type.Object(TokenFields, { $id: 'Token', description: 'A bearer token; its value is shown once, when it is created, and never again' });

export const TokenCreated = Type.Object(
  { ...TokenFields, token: Type.String({ pattern: '^vsl_[A-Za-z0-9_-]{43}$', description: 'the bearer token itself: shown in this reply only, and never again' }) },
  { $id: 'TokenCreated', description: 'A new token, with its value' },
);

export const ConsoleLog = Type.Object(
  {
    output: Type.String({ description: 'the end of what the guest wrote to its serial console: UTF-8, invalid bytes as U+FFFD' }),
    bytes: Int64({ minimum: 0, description: 'the bytes of the log that output holds' }),
    truncated: Type.Boolean({ description: 'true when the log holds earlier output than this (or held it before its size limit cut it)' }),
  },
  { $id: 'ConsoleLog', description: "A runtime's serial console: its kernel's and init's boot messages, and anything written to /dev/ttyS0" },
);

const OutputRange = Type.Object(
  {
    start: Int64({ minimum: 0, description: 'offset of the oldest byte the ring still holds' }),
    end: Int64({ minimum: 0, description: 'bytes the channel produced in all' }),
  },
  { additionalProperties: false },
);

/** The agent's process id: a uint32 from 1, never reused while the runtime runs. */
const ProcessId = Int64({ minimum: 1, maximum: 4294967295, description: "the guest agent's id of the process (not its pid), never reused while the runtime runs" });

export const Process = Type.Object(
  {
    id: ProcessId,
    pid: Int32({ description: 'the pid in the guest' }),
    command: Type.String({ description: 'argv joined by spaces, at most 256 bytes' }),
    status: StringEnum(['running', 'exited', 'signaled'] as const),
    exit_code: Nullable(Int32({ description: 'the exit status, or 128 + n when signal n ended it; null while running' })),
    signal: Nullable(Int32({ description: 'the signal that ended it' })),
    pty: Type.Boolean(),
    stdin_open: Type.Boolean(),
    started_at: Type.String({ format: 'date-time' }),
    ended_at: Nullable(Type.String({ format: 'date-time' })),
    stdout: OutputRange,
    stderr: OutputRange,
  },
  { $id: 'Process', additionalProperties: false },
);

// ---- server-sent events: the JSON data of each event of an output stream (docs/processes.md) ----

export const OutputChunkEvent = Type.Object(
  {
    offset: Int64({ minimum: 0, description: 'where these bytes start in their channel (bytes numbered from 0)' }),
    data: Type.String({ description: 'the bytes: as text when they are valid UTF-8, else base64' }),
    encoding: StringEnum(['utf8', 'base64'] as const),
    lost: Type.Optional(Int64({ minimum: 1, description: "bytes the guest's output ring dropped before this chunk, unread" })),
  },
  { $id: 'OutputChunkEvent', additionalProperties: false, description: 'The data of a stdout or stderr event' },
);

export const ExecExitEvent = Type.Object(
  {
    exit_code: Int32({ description: 'the exit status, or 128 + n when signal n ended the command' }),
    duration_ms: Int64({ minimum: 0 }),
  },
  { $id: 'ExecExitEvent', additionalProperties: false, description: 'The data of the exit event that ends a streamed exec' },
);

export const OutputEndEvent = Type.Object(
  { next: Type.String({ description: 'where to resume (as `since`): the position after the last byte sent' }) },
  { $id: 'OutputEndEvent', additionalProperties: false, description: 'The data of the end event: with follow=false, all the output that exists now was sent' },
);

/**
 * One server-sent event as its fields: `event` names it, `data` (JSON on the wire) has the schema
 * given, and `id` is where to resume after it. A text/event-stream schema describes one event, as
 * OpenAPI 3.2's itemSchema does and as generators that read event streams expect.
 */
const ServerEvent = (event: string, data: TSchema) =>
  Type.Object(
    { event: StringEnum([event]), data, id: Type.Optional(Type.String({ description: 'the position after this event, as `since` or Last-Event-ID take it' })) },
    { additionalProperties: false },
  );
const outputEvents = () => [ServerEvent('start', Type.Ref(Process)), ServerEvent('stdout', Type.Ref(OutputChunkEvent)), ServerEvent('stderr', Type.Ref(OutputChunkEvent))];

export const ExecEvent = Type.Union([...outputEvents(), ServerEvent('exit', Type.Ref(ExecExitEvent)), ServerEvent('error', Type.Ref(ErrorEnvelope))], {
  $id: 'ExecEvent',
  description: 'An event of a streamed exec: start, then stdout and stderr as they come, then exit, or error',
});

export const ProcessOutputEvent = Type.Union([...outputEvents(), ServerEvent('exit', Type.Ref(Process)), ServerEvent('end', Type.Ref(OutputEndEvent)), ServerEvent('error', Type.Ref(ErrorEnvelope))], {
  $id: 'ProcessOutputEvent',
  description: "An event of a process's output: start, then stdout and stderr, then exit (the process, once it exited) or end (follow=false, at what exists now), or error",
});

export const TemplateBuildEvent = Type.Union([
  ServerEvent('step', Type.Object({ step: Int32({ minimum: 1 }), name: Type.String() })),
  ServerEvent('output', Type.Object({ step: Int32({ minimum: 1 }), text: Type.String({ description: 'UTF-8 text' }) })),
  ServerEvent('step_done', Type.Object({
    step: Int32({ minimum: 1 }),
    duration_ms: Int64({ minimum: 0 }),
    cached: Type.Boolean(),
    exit_code: Nullable(Int32()),
    output_omitted_bytes: Type.Optional(Int64({ minimum: 0, description: "output left out of the log (past its 1 MiB)" })),
  })),
  ServerEvent('done', Type.Object({ state: StringEnum(['ready', 'failed'] as const), failure: Nullable(TemplateFailure) })),
  ServerEvent('error', Type.Ref(ErrorEnvelope)),
], {
  $id: 'TemplateBuildEvent',
  description: "An event of a template's build log: each step, its output and its end (duration, from the cache or not), then done, or error",
});

/** Every named schema, registered with Fastify so `$ref`s resolve and OpenAPI lists them as components. */
export const SHARED_SCHEMAS = [
  ErrorEnvelope,
  Resources,
  EgressPolicy,
  IngressSpec,
  Labels,
  Lifecycle,
  IngressUrl,
  Runtime,
  Secret,
  InjectionConfig,
  SecretInjectionRule,
  Checkpoint,
  Template,
  TemplateBuildEvent,
  ExecResult,
  Process,
  OutputChunkEvent,
  ExecExitEvent,
  OutputEndEvent,
  ExecEvent,
  ProcessOutputEvent,
  TcpConnectionAudit,
  HttpRequestAudit,
  IcmpDropAudit,
  LifecycleAudit,
  Audit,
  FileWritten,
  FileInfo,
  FileStat,
  Health,
  Token,
  TokenCreated,
  ConsoleLog,
];

// ---- requests ----

export const RuntimeCreateBody = Type.Object(
  {
    display_name: DisplayName('unique among your runtimes; not UUID-shaped'),
    resources: Type.Optional(
      Type.Object(
        {
          limits: Type.Optional(Type.Object({ memory_mib: MemoryMib }, { additionalProperties: false, description: 'default 512 MiB' })),
          requests: Type.Optional(Type.Object({ memory_mib: Type.Optional(MemoryMib) }, { additionalProperties: false, description: 'at most the limit; default the limit' })),
          vcpus: Type.Optional(Int32({ ...Vcpus, description: 'default 1' })),
        },
        { additionalProperties: false, description: "a fork keeps its checkpoint's memory and vcpus" },
      ),
    ),
    egress_policy: Type.Optional(Type.Ref(EgressPolicy)),
    ingress_specs: Type.Optional(Type.Array(Type.Ref(IngressSpec), { maxItems: 64, default: [], description: 'ports unique' })),
    checkpoint: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'ID or name of a ready checkpoint to fork from' })),
    template: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: 'ID or name of a ready template to boot from (not with checkpoint); its ENV and WORKDIR are the defaults of every exec' })),
    labels: Type.Optional(Type.Ref(Labels)),
    env: Type.Optional(
      Type.Record(Type.String(), Type.String({ maxLength: MAX_ENV_BYTES }), {
        maxProperties: MAX_ENV_VARS,
        description: `environment variables every exec, process and terminal of the runtime gets, over its template's ENV and under the request's own env: at most ${MAX_ENV_VARS}, names match ${ENV_NAME_PATTERN}, at most ${MAX_ENV_BYTES} bytes of names and values together, no NUL. Shown on the runtime by name only`,
      }),
    ),
    lifecycle: Type.Optional(LifecycleInput),
  },
  { additionalProperties: false },
);

export const RuntimePatchBody = Type.Object(
  {
    egress_policy: Type.Optional(Type.Ref(EgressPolicy)),
    resources: Type.Optional(
      Type.Object(
        {
          limits: Type.Optional(Type.Object({ memory_mib: MemoryMib }, { additionalProperties: false, description: 'of a running VM: applies at the next start' })),
          requests: Type.Optional(Type.Object({ memory_mib: Type.Optional(MemoryMib) }, { additionalProperties: false, description: 'applies at once' })),
        },
        { additionalProperties: false },
      ),
    ),
    labels: Type.Optional(Type.Ref(Labels)),
    lifecycle: Type.Optional(LifecycleInput),
  },
  { additionalProperties: false },
);

export const MAX_OUTPUT_BYTES = 4194304;
export const DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024;
export const DEFAULT_EXEC_TIMEOUT_SECS = 60;

/** Docker's `--user`: a name or id, with a group after a colon; looked up in the guest's own /etc/passwd and /etc/group. */
const CommandUser = Type.String({
  minLength: 1,
  maxLength: 256,
  pattern: '^[A-Za-z0-9_.][A-Za-z0-9_.-]*\\$?(:[A-Za-z0-9_.][A-Za-z0-9_.-]*)?$',
  description: "user[:group], by name or id, as `docker exec --user`; default: the template's USER, else root. HOME becomes the user's home unless env sets it",
});

export const ExecBody = Type.Object(
  {
    command: Type.String({ minLength: 1, maxLength: 131072, description: 'without args, run by /bin/sh -c; with args, the executable, found on PATH' }),
    args: Type.Optional(Type.Array(Type.String({ maxLength: 131072 }), { maxItems: 4096, default: [] })),
    cwd: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 4096 }))),
    env: Type.Optional(Type.Record(Type.String(), Type.String({ maxLength: 131072 }), { description: 'overlaid on PATH, HOME=/root, LANG=C.UTF-8, TERM=xterm' })),
    user: Type.Optional(Nullable(CommandUser)),
    stdin: Type.Optional(Nullable(Type.String({ description: 'UTF-8 text' }))),
    max_output_bytes: Type.Optional(
      Nullable(Int32({ minimum: 0, maximum: MAX_OUTPUT_BYTES, default: DEFAULT_MAX_OUTPUT_BYTES, description: 'bytes kept per stream; buffered exec only' })),
    ),
    timeout_secs: Type.Optional(
      Nullable(Int64({ minimum: 1, default: DEFAULT_EXEC_TIMEOUT_SECS, description: 'then the whole process tree is killed (uint64; the timer stops at 24.8 days)' })),
    ),
    background: Type.Optional(
      Type.Boolean({ default: false, description: 'streaming only: when the client disconnects, the command runs on as a background process instead of being killed' }),
    ),
  },
  { additionalProperties: false },
);

const TerminalSize = {
  rows: Int32({ minimum: 1, maximum: 1000 }),
  cols: Int32({ minimum: 1, maximum: 1000 }),
};

export const ProcessCreateBody = Type.Object(
  {
    command: ExecBody.properties.command,
    args: ExecBody.properties.args,
    cwd: ExecBody.properties.cwd,
    env: ExecBody.properties.env,
    user: ExecBody.properties.user,
    pty: Type.Optional(Nullable(Type.Object(TerminalSize, { additionalProperties: false, description: 'run on a terminal of this size; stdout then carries all it shows' }))),
    stdin: Type.Optional(Type.Boolean({ default: false, description: 'keep stdin open for POST .../stdin (a terminal always takes input)' })),
    ring_bytes: Type.Optional(Int32({ minimum: MIN_RING_BYTES, maximum: MAX_RING_BYTES, default: DEFAULT_RING_BYTES, description: 'output kept per channel for readers' })),
  },
  { additionalProperties: false },
);

// ---- path parameters (docs/api.md, "Identifiers") ----

const RuntimeId = Type.String({ description: 'the runtime: its UUID or its display name' });
const RuleId = Type.String({ description: "the secret injection rule's UUID" });

export const RuntimeParams = Type.Object({ runtime_id: RuntimeId });
export const SecretParams = Type.Object({ secret_id: Type.String({ description: 'the secret: its UUID or its display name' }) });
export const TemplateParams = Type.Object({ template_id: Type.String({ description: 'the template: its UUID or its display name' }) });
export const TemplateArchiveQuery = Type.Object({
  name: DisplayName('the new template: unique among your templates; not UUID-shaped'),
  dockerfile: Type.String({ minLength: 1, maxLength: 4096, description: "the body is a build context (a tar stream, gzip or not) and this is its Dockerfile's path in it (usually Dockerfile); absent: the body is an image archive" }),
  build_args: Type.String({ maxLength: 1024 * 1024, description: 'with dockerfile: a JSON object of build args (--build-arg), e.g. {"VERSION":"3.12"}' }),
  egress_policy: Type.String({ maxLength: 1024 * 1024, description: "with dockerfile: a JSON egress policy for the build's RUN steps, as a runtime's; default {\"enabled\":true,\"allowed_hosts\":[]}: intercepted, no host allowed" }),
  ready_cmd: Type.String({ minLength: 1, maxLength: MAX_READY_CMD_BYTES, description: "with dockerfile: a shell command run in the build VM (as the template's USER, with its ENV and WORKDIR) every second until it exits 0; the template is sealed then, its start command (CMD/ENTRYPOINT) running. Not with ready_port" }),
  ready_port: Int32({ minimum: 1, maximum: 65535, description: 'with dockerfile: the template is sealed once this TCP port in the guest accepts a connection (checked from inside the guest), its start command running. Not with ready_cmd' }),
  ready_timeout_secs: Int32({ minimum: 1, maximum: MAX_READY_TIMEOUT_SECS, description: `with dockerfile: how long the start command has to become ready before the build fails; default ${DEFAULT_READY_TIMEOUT_SECS}` }),
});
export const CheckpointParams = Type.Object({ checkpoint_id: Type.String({ description: 'the checkpoint: its UUID or its display name' }) });
export const RuleParams = Type.Object({ rule_id: RuleId });
export const RuntimeRuleParams = Type.Object({ runtime_id: RuntimeId, rule_id: RuleId });
export const ProcessParams = Type.Object({ runtime_id: RuntimeId, process_id: ProcessId });

// ---- query strings ----

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
  rows: Type.Optional(Int32({ ...TerminalSize.rows, default: 24 })),
  cols: Type.Optional(Int32({ ...TerminalSize.cols, default: 80 })),
  process_id: Type.Optional(Int64({ ...ProcessId, description: 'attach to this pty process instead of starting a login shell' })),
  user: Type.Optional(CommandUser),
});

export const TemplateCreateBody = Type.Object(
  {
    name: DisplayName('unique among your templates; not UUID-shaped'),
    image: Type.String({ minLength: 1, maxLength: 512, description: 'the image to pull, as docker pull takes it: debian:12, registry.example.com:5000/team/app:tag, …@sha256:…' }),
    registry_secret: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: "a secret of yours (id or name) whose value is the registry's username:password" })),
  },
  { additionalProperties: false },
);

export const SecretCreateBody = Type.Object(
  {
    name: DisplayName('unique among your secrets; not UUID-shaped'),
    value: Type.String({ minLength: 1, maxLength: MAX_SECRET_BYTES, description: '1 byte to 64 KiB of UTF-8, without CR, LF or NUL' }),
    cache_ttl_secs: Type.Optional(Int64({ ...CacheTtlSecs, default: 0 })),
  },
  { additionalProperties: false },
);

export const RuleCreateBody = Type.Object(
  {
    host: Type.String({ minLength: 1, maxLength: 260, description: 'a host pattern, as in allowed_hosts' }),
    injection: Type.Ref(InjectionConfig),
    path: Type.Optional(Nullable(Type.String({ maxLength: 1024, description: 'a glob: * within a segment, ** across; null or absent matches every path' }))),
    secret: Type.String({ minLength: 1, maxLength: 128, description: 'the secret: its UUID or its display name' }),
  },
  { additionalProperties: false },
);

export const CheckpointCreateBody = Type.Object(
  {
    kind: Type.Optional(StringEnum(['full'] as const, { default: 'full', description: 'memory and disk; the only kind (beta)' })),
    name: Type.Optional(DisplayName('default: <runtime>-<time>')),
  },
  { additionalProperties: false },
);

export const ListQuery = Type.Object({
  limit: Type.Optional(Int32({ minimum: 1, maximum: 1000, default: 100, description: 'the most items in one page' })),
  page_token: Type.Optional(Type.String({ pattern: '^[A-Za-z0-9_-]{1,64}$', description: 'next_page_token of the previous page' })),
});

export const RuntimeListQuery = Type.Composite([
  ListQuery,
  Type.Object({
    label: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 320 }), {
        maxItems: MAX_LABEL_SELECTORS,
        description: 'key=value: runtimes with that label; key: runtimes that have the key. Repeat for more; all must hold',
      }),
    ),
    status: Type.Optional(
      Type.Array(Type.String({ minLength: 1, maxLength: 128 }), { maxItems: 8, description: 'runtimes in any of these statuses; repeat or give a comma list (running,paused)' }),
    ),
  }),
]);

export const CheckpointListQuery = Type.Composite([
  ListQuery,
  Type.Object({ include_system: Type.Optional(Type.Boolean({ default: false, description: "also the service's own templates" })) }),
]);

export const AuditQuery = Type.Composite([
  ListQuery,
  Type.Object({
    category: Type.Optional(StringEnum(AUDIT_CATEGORIES, { description: 'default: every category' })),
    runtime: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: "the runtime's UUID or display name; a deleted runtime's UUID still filters" })),
  }),
]);

export const FileQuery = Type.Object({ path: Type.String({ minLength: 1, maxLength: 4096, description: 'an absolute path inside the runtime' }) });
export const StatQuery = Type.Composite([
  FileQuery,
  Type.Object({ follow_symlinks: Type.Optional(Type.Boolean({ default: true, description: 'false describes a symbolic link itself' })) }),
]);
export const RemoveQuery = Type.Composite([
  FileQuery,
  Type.Object({ recursive: Type.Optional(Type.Boolean({ default: false, description: 'remove a directory with everything in it' })) }),
]);

// ---- envelopes ----

/**
 * A success response: its envelope, and what it holds (OpenAPI's description of the response;
 * @fastify/swagger takes it from this key and leaves it out of the schema).
 */
export const DataOf = <T extends TSchema>(schema: T, holds: string) => Type.Object({ data: schema }, { 'x-response-description': holds });
export const ListOf = <T extends TSchema>(schema: T, holds: string) =>
  Type.Object(
    {
      data: Type.Array(schema),
      next_page_token: Type.Optional(Type.String({ description: 'present when there is a next page: pass it as page_token' })),
    },
    { 'x-response-description': holds },
  );
export const Empty = (holds: string) => Type.Object({ data: Type.Object({}, { additionalProperties: false }) }, { 'x-response-description': holds });

// ---- token and console log requests ----

export const TokenCreateBody = Type.Object(
  {
    tenant: DisplayName('the tenant the token acts for; a new name makes a new tenant'),
    scopes: Type.Array(StringEnum(SCOPES), { minItems: 1, maxItems: 64, description: 'at least one; repeats are dropped' }),
    name: Type.Optional(DisplayName('a label for the token; not unique (default "token")')),
  },
  { additionalProperties: false },
);

export const TokenListQuery = Type.Composite([
  ListQuery,
  Type.Object({ tenant: Type.Optional(Type.String({ minLength: 1, maxLength: 128, description: "only this tenant's tokens" })) }),
]);

export const TokenParams = Type.Object({ token_id: Type.String({ description: "the token's UUID" }) });

export const ConsoleLogQuery = Type.Object({
  max_bytes: Type.Optional(
    Int32({ minimum: 1, maximum: MAX_CONSOLE_LOG_BYTES, default: DEFAULT_CONSOLE_LOG_BYTES, description: 'the most bytes of the end of the log to return (1 MiB at most)' }),
  ),
});
