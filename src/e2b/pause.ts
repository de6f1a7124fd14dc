/**
 * E2B's pause and resume over Vessel's lifecycle (docs/e2b.md, "Pause and resume"): a paused
 * sandbox is a `paused` runtime, its VM stopped in memory, because the core suspends to disk only
 * on an idle timer, not on request. Runtimes that are `suspended` or `shutdown` read as paused
 * sandboxes too, and resume (from disk, or by booting) the same way.
 */
import { VesselError, invalidArgument } from '../core/errors.js';
import type { RuntimeService } from '../core/runtimes.js';
import type { Runtime } from '../core/types.js';
import { sandboxNotFound } from './answers.js';
import { stateOf } from './sandboxes.js';

/** E2B's 409: what the SDK's pause reads as "already paused" (false) and resume as a conflict. */
const conflict = (message: string) => new VesselError('failed_precondition', message);

/**
 * Pauses a running sandbox. Another state is E2B's 409; a pause that drops memory (E2B's
 * `memory: false`) is refused, as E2B refuses a capability it has not enabled.
 */
export async function pauseSandbox(runtimes: RuntimeService, rt: Runtime, keepMemory: boolean): Promise<Runtime> {
  if (!keepMemory) throw invalidArgument('a pause without memory (memory: false) is not served: a paused sandbox keeps its memory (docs/e2b.md)');
  if (stateOf(rt.status) === 'paused') throw conflict(`sandbox '${rt.id}' is already paused`);
  // The core checks the status again under the runtime's lock: a racing pause gets the same 409.
  return runtimes.lifecycle(rt.tenantId, rt.id, 'pause');
}

/**
 * Brings a paused sandbox back: a paused or suspended runtime resumes with its memory, a stopped
 * one boots again. A running one is returned as it is; one in no E2B state is not found, as E2B
 * answers for a sandbox it has no snapshot of. `keepMemory: false` (E2B's cold boot) is refused
 * for one that would resume from memory.
 */
export async function wakeSandbox(runtimes: RuntimeService, rt: Runtime, keepMemory: boolean): Promise<Runtime> {
  switch (rt.status) {
    case 'running':
      return rt;
    case 'paused':
    case 'suspended':
      if (!keepMemory) throw invalidArgument('a resume without memory (memory: false) is not served: a paused sandbox resumes with its memory (docs/e2b.md)');
      return runtimes.lifecycle(rt.tenantId, rt.id, 'resume');
    case 'shutdown':
      return runtimes.lifecycle(rt.tenantId, rt.id, 'start');
    default:
      throw sandboxNotFound(rt.id);
  }
}

/** E2B's legacy resume: as connect, but a running sandbox is a 409. */
export async function resumeSandbox(runtimes: RuntimeService, rt: Runtime, keepMemory: boolean): Promise<Runtime> {
  if (rt.status === 'running') throw conflict(`sandbox '${rt.id}' is already running`);
  return wakeSandbox(runtimes, rt, keepMemory);
}
