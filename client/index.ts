/**
 * Vessel's TypeScript SDK (`vessel/client`), for Node 20+ and browsers. docs/sdk.md shows it in
 * use. Nothing here imports the service's code: the API's types are generated from its OpenAPI
 * document (client/generated/openapi.ts).
 */
export { Vessel } from './vessel.js';
export type { VesselOptions, CallOptions } from './transport.js';
export { VesselError, type ErrorCode } from './errors.js';
export { DEFAULT_RETRY_POLICY, type RetryPolicy } from './retry.js';
export { Paged, type Page, type ListOptions } from './paging.js';
export { Runtime, type ExecStream, type TerminalOptions } from './runtime.js';
export type { Runtimes, ForkRequest, RuntimeListOptions } from './runtimes.js';
export type { Checkpoints } from './checkpoints.js';
export type { Secrets } from './secrets.js';
export type { RuntimeRules, AllRules } from './rules.js';
export type { Audits, AuditListOptions } from './audits.js';
export type { Tokens, TokenListOptions } from './tokens.js';
export type { ConsoleLogOptions } from './console-log.js';
export type { Processes, ProcessOutput, OutputOptions } from './processes.js';
export type { Files } from './files.js';
export type { BodySource } from './body.js';
export type { CommandStream, OutputHandlers } from './command-stream.js';
export { OutputChunk, type CommandEvent, type ExecExit, type OutputEnd, type OutputChannel } from './output.js';
export type { Terminal, TerminalExit } from './terminal.js';
export type { WebSocketClass } from './websocket.js';
export type * from './api-types.js';
export type { paths, components } from './generated/openapi.js';
