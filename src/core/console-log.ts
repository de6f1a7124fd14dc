/**
 * A runtime's console log: what its guest wrote to the serial console (the kernel's and init's
 * boot messages), for debugging a boot. The guest writes it, so it is read bounded and shown as
 * text with invalid UTF-8 replaced; the driver keeps it (Machines.readConsoleLog).
 */
import { notFound } from './errors.js';
import type { ConsoleLog, Machines } from './ports.js';
import type { RuntimeService } from './runtimes.js';

/** What a request gets unless it asks for more or less: a boot's messages fit several times over. */
export const DEFAULT_CONSOLE_LOG_BYTES = 64 * 1024;
/** The most one request may ask for. */
export const MAX_CONSOLE_LOG_BYTES = 1024 * 1024;

export class ConsoleLogService {
  constructor(
    private readonly runtimes: RuntimeService,
    private readonly machines: Pick<Machines, 'readConsoleLog'>,
  ) {}

  /** The last `maxBytes` of the runtime's console, in any state; not_found when it has none (yet, or any more). */
  async read(tenantId: string, ref: string, maxBytes: number): Promise<ConsoleLog> {
    const rt = await this.runtimes.get(tenantId, ref);
    const log = await this.machines.readConsoleLog(rt.id, maxBytes);
    if (log === null) throw notFound('console log of runtime', ref);
    return log;
  }
}

/**
 * The log's bytes as text. Output cut at its start may begin inside a character: its stray
 * continuation bytes are dropped rather than shown as U+FFFD. Anything else invalid (a guest
 * writes what it likes) becomes U+FFFD.
 */
export function consoleLogOf(bytes: Uint8Array, truncated: boolean): ConsoleLog {
  let start = 0;
  if (truncated) while (start < Math.min(3, bytes.length) && (bytes[start]! & 0xc0) === 0x80) start++;
  return { output: new TextDecoder('utf-8', { fatal: false }).decode(bytes.subarray(start)), bytes: bytes.length, truncated };
}
