/**
 * The runtime state machine: which operation is allowed from which status, and where it leads.
 * Everything not listed here is failed_precondition.
 */
import { failedPrecondition } from './errors.js';
import type { RuntimeStatus } from './types.js';

export type LifecycleOp = 'start' | 'pause' | 'resume' | 'suspend' | 'stop';
export type GatedOp = LifecycleOp | 'exec' | 'files' | 'checkpoint' | 'patch_memory';

const ALLOWED_FROM: Record<GatedOp, readonly RuntimeStatus[]> = {
  start: ['shutdown', 'crashed', 'suspended'],
  pause: ['running'],
  resume: ['paused', 'suspended'],
  suspend: ['running'],
  stop: ['running', 'paused'],
  exec: ['running'],
  files: ['running'],
  checkpoint: ['running', 'paused'],
  patch_memory: ['running', 'paused', 'shutdown', 'crashed', 'suspended'],
};

export const RESULT_OF: Record<LifecycleOp, RuntimeStatus> = {
  start: 'running',
  pause: 'paused',
  resume: 'running',
  suspend: 'suspended',
  stop: 'shutdown',
};

export const isAllowed = (op: GatedOp, status: RuntimeStatus): boolean => ALLOWED_FROM[op].includes(status);

export function requireState(op: GatedOp, status: RuntimeStatus, runtimeName: string): void {
  if (!isAllowed(op, status)) {
    const need = ALLOWED_FROM[op].join(' or ');
    throw failedPrecondition(`cannot ${op.replace('_', ' ')} runtime '${runtimeName}' while it is ${status}; it must be ${need}`);
  }
}

/** Statuses in which a QEMU process is expected to exist. */
export const LIVE_STATUSES: readonly RuntimeStatus[] = ['running', 'paused', 'creating'];
/** Statuses without a VM that a runtime reaches by no longer running: its auto-delete clock runs in them. */
export const STOPPED_STATUSES: readonly RuntimeStatus[] = ['shutdown', 'suspended', 'crashed', 'error'];
