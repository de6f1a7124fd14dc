/**
 * When a runtime's lifecycle settings act on it (docs/api.md, "Lifecycle settings"): a running
 * runtime idle past its timeout is suspended or stopped, and one stopped past its auto-delete
 * time is deleted. This decides; RuntimeService acts, under the runtime's lock, after deciding
 * again on what the store holds then.
 */
import { STOPPED_STATUSES } from './lifecycle.js';
import type { Runtime } from './types.js';

/** How often the service looks for runtimes whose timers are due: a timer fires at most this late. */
export const LIFECYCLE_TICK_MS = 1000;

export type TimerAction = { action: 'suspend' | 'stop'; reason: string } | { action: 'delete'; reason: string };

/** What a runtime's activity looks like to its idle timer. */
export interface Activity {
  /** Work (a command, a transfer, a terminal) is in progress: never idle. */
  busy: boolean;
  /** Epoch ms of the last activity; the service's start counts as activity. */
  lastAt: number;
}

/** The idle timeout in force: the runtime's own, else the service default; 0 is never. */
export const idleTimeoutOf = (rt: Runtime, defaultIdleSecs: number): number => rt.lifecycle.idleTimeoutSecs ?? defaultIdleSecs;

export function dueAction(rt: Runtime, activity: Activity, now: number, defaultIdleSecs: number): TimerAction | null {
  if (rt.status === 'running') {
    const idleSecs = idleTimeoutOf(rt, defaultIdleSecs);
    if (idleSecs <= 0 || activity.busy || now - activity.lastAt < idleSecs * 1000) return null;
    const how = rt.lifecycle.onIdle === 'stop' ? 'stopped' : 'suspended';
    return { action: rt.lifecycle.onIdle, reason: `${how} after ${idleSecs} s without activity (lifecycle.idle_timeout_secs)` };
  }
  const { autoDeleteSecs } = rt.lifecycle;
  if (autoDeleteSecs === null || rt.stoppedAt === null || !STOPPED_STATUSES.includes(rt.status) || activity.busy) return null;
  if (now - Date.parse(rt.stoppedAt) < autoDeleteSecs * 1000) return null;
  return { action: 'delete', reason: `deleted ${autoDeleteSecs} s after it stopped running (lifecycle.auto_delete_secs)` };
}
