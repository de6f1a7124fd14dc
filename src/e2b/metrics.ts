/**
 * E2B's SandboxMetric from what Vessel knows of a runtime (docs/e2b.md, "Metrics"). Vessel keeps
 * no samples of a guest's CPU, memory or disk use, so a metric carries only what is true of the
 * VM itself: its vCPUs and its RAM. The usage fields are left out, not given as zeros: a zero
 * would read as a measurement.
 */
import type { Runtime } from '../core/types.js';

const MIB = 1024 * 1024;

/** Epoch seconds, as E2B's metrics query bounds its interval (start and end, inclusive). */
export interface MetricsWindow {
  start?: number | undefined;
  end?: number | undefined;
}

/** The metric of the runtime at `now`; none unless it runs (a VM to measure) and `now` is in the window. */
export function metricsOf(rt: Runtime, now: Date, window: MetricsWindow = {}) {
  const secs = Math.floor(now.getTime() / 1000);
  if (rt.status !== 'running') return [];
  if ((window.start !== undefined && secs < window.start) || (window.end !== undefined && secs > window.end)) return [];
  return [{ timestamp: now.toISOString(), timestampUnix: secs, cpuCount: rt.resources.vcpus, memTotal: rt.resources.limits.memory_mib * MIB }];
}
