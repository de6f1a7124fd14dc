/**
 * Names for the generated types that the SDK's methods take and return. Request bodies are
 * looked up by path and method, so they follow the served document whatever it calls them.
 */
import type { components, paths } from './generated/openapi.js';

type Schemas = components['schemas'];

export type RuntimeInfo = Schemas['Runtime'];
export type Resources = Schemas['Resources'];
export type EgressPolicy = Schemas['EgressPolicy'];
export type Checkpoint = Schemas['Checkpoint'];
export type Secret = Schemas['Secret'];
export type SecretInjectionRule = Schemas['SecretInjectionRule'];
export type Audit = Schemas['Audit'];
export type ExecResult = Schemas['ExecResult'];
export type Process = Schemas['Process'];
export type FileInfo = Schemas['FileInfo'];
export type FileStat = Schemas['FileStat'];
export type FileWritten = Schemas['FileWritten'];
export type Token = Schemas['Token'];
export type TokenCreated = Schemas['TokenCreated'];
export type ConsoleLog = Schemas['ConsoleLog'];
export type RuntimeStatus = Schemas['Runtime']['status'];
export type Labels = Schemas['Labels'];
export type Lifecycle = Schemas['Lifecycle'];
export type IngressUrl = Schemas['IngressUrl'];

type JsonBody<P extends keyof paths, M extends keyof paths[P]> =
  NonNullable<paths[P][M]> extends { requestBody?: { content: { 'application/json': infer B } } } ? B : never;
type Query<P extends keyof paths, M extends keyof paths[P]> =
  NonNullable<paths[P][M]> extends { parameters: { query?: infer Q } } ? NonNullable<Q> : never;

export type RuntimeCreateRequest = JsonBody<'/v1/runtimes', 'post'>;
export type RuntimePatchRequest = JsonBody<'/v1/runtimes/{runtime_id}', 'patch'>;
/** A streamed exec takes `background` too; a buffered one refuses it. */
export type ExecRequest = Omit<JsonBody<'/v1/runtimes/{runtime_id}/exec', 'post'>, 'background'>;
export type ExecStreamRequest = JsonBody<'/v1/runtimes/{runtime_id}/exec', 'post'>;
export type ProcessStartRequest = JsonBody<'/v1/runtimes/{runtime_id}/processes', 'post'>;
export type SignalName = JsonBody<'/v1/runtimes/{runtime_id}/processes/{process_id}/signal', 'post'>['signal'];
export type SecretCreateRequest = JsonBody<'/v1/secrets', 'post'>;
export type RuleCreateRequest = JsonBody<'/v1/runtimes/{runtime_id}/secret-injection-rules', 'post'>;
export type CheckpointCreateRequest = NonNullable<JsonBody<'/v1/runtimes/{runtime_id}/checkpoints', 'post'>>;
export type AuditFilter = Omit<Query<'/v1/audits', 'get'>, 'page_token'>;
export type TerminalQuery = Query<'/v1/runtimes/{runtime_id}/terminal', 'get'>;
export type TokenCreateRequest = JsonBody<'/v1/tokens', 'post'>;
