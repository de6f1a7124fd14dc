/** A runtime's console log: the end of what its guest wrote to the serial console. */
import type { ConsoleLog } from './api-types.js';
import type { CallOptions, Transport } from './transport.js';

export interface ConsoleLogOptions extends CallOptions {
  /** The most bytes of the log's end to return: 1 to 1 MiB (the service's default is 64 KiB). */
  maxBytes?: number | undefined;
}

export function readConsoleLog(t: Transport, runtimeId: string, options: ConsoleLogOptions = {}): Promise<ConsoleLog> {
  const query = options.maxBytes === undefined ? {} : { max_bytes: options.maxBytes };
  return t.call('idempotent', options, (signal) => t.api.GET('/v1/runtimes/{runtime_id}/console-log', { params: { path: { runtime_id: runtimeId }, query }, signal }));
}
