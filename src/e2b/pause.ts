/**
 * E2B's pause and resume over Vessel's lifecycle (docs/e2b.md, "Pause and resume"): a paused
 * sandbox is a `suspended` runtime, its memory, devices and processes saved to disk and its VM
 * ended, as E2B keeps a paused sandbox's snapshot and frees its machine. Runtimes that are
 * `paused` (in memory) or `shutdown` read as paused sandboxes too, and resume the same way.
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
  // A paused sandbox stays until it is resumed or killed, as E2B keeps its snapshot: the delete
  // that a timed-out sandbox gets (sandboxes.ts, lifecycleOf) is off while it is paused.
  if (rt.lifecycle.autoDeleteSecs !== null) await runtimes.patch(rt.tenantId, rt.id, { lifecycle: { auto_delete_secs: null } });
  // The core checks the status again under the runtime's lock: a racing pause gets the same 409.
  return runtimes.lifecycle(rt.tenantId, rt.id, 'suspend');
}

/** Back from a pause: a sandbox without autoPause is killed at its timeout again. */
async function timedOutIsKilled(runtimes: RuntimeService, rt: Runtime): Promise<Runtime> {
  return rt.lifecycle.onIdle === 'stop' && rt.lifecycle.autoDeleteSecs === null ? runtimes.patch(rt.tenantId, rt.id, { lifecycle: { auto_delete_secs: 0 } }) : rt;
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
      return timedOutIsKilled(runtimes, await runtimes.lifecycle(rt.tenantId, rt.id, 'resume'));
    case 'shutdown':
      return timedOutIsKilled(runtimes, await runtimes.lifecycle(rt.tenantId, rt.id, 'start'));
    default:
      throw sandboxNotFound(rt.id);
  }
}

/** E2B's legacy resume: as connect, but a running sandbox is a 409. */
export async function resumeSandbox(runtimes: RuntimeService, rt: Runtime, keepMemory: boolean): Promise<Runtime> {
  if (rt.status === 'running') throw conflict(`sandbox '${rt.id}' is already running`);
  return wakeSandbox(runtimes, rt, keepMemory);
}
