/**
 * A Dockerfile template's start command (docs/templates.md, "The start command"): its CMD and
 * ENTRYPOINT, started in the build VM as a background process after the last step, and waited
 * for until its ready check passes, so that the layer sealed next (and every fork of it) has it
 * running. The waiting is the host's: each check is one short command in the guest, so a check
 * that hangs costs one try, and a build stopped stops at the next.
 */
import { setTimeout as sleepFor } from 'node:timers/promises';
import type { BuildReporter } from '../core/build-log.js';
import { isRoot } from '../core/guest-users.js';
import type { BuildVm } from '../core/ports.js';
import { BuildFailure } from '../core/templates.js';
import type { ReadyCheck } from '../core/types.js';
import type { ImageConfig } from './dockerfile.js';
import type { StartSpec } from './step-keys.js';

/** Pause between two ready checks. */
const CHECK_INTERVAL_MS = 1000;
/** One check's own limit: a check that hangs (a server that accepts and never answers) is a failed try. */
const CHECK_TIMEOUT_MS = 30_000;
/** What a failure shows of the start command's output, and of the last check's. */
const TAIL_BYTES = 3 * 1024;
const CHECK_TAIL_BYTES = 1024;

/** Time as the wait sees it: real, or a test's. */
export interface ReadyClock {
  now(): number;
  /** Resolves after `ms`, or at once when `signal` aborts. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

export const REAL_CLOCK: ReadyClock = {
  now: () => Date.now(),
  // Node's abortable timer rejects on abort; the wait only needs to stop sleeping.
  sleep: (ms, signal) => sleepFor(ms, undefined, { signal }).catch(() => undefined),
};

/**
 * The command a container of this config runs, by Docker's rule: ENTRYPOINT followed by CMD. A
 * shell form is already `/bin/sh -c text` in the plan, so a shell-form ENTRYPOINT leaves CMD as
 * sh's $0 and beyond, unused, as in Docker. Null when neither gives a word.
 */
export function startSpecOf(config: ImageConfig): StartSpec | null {
  const argv = [...(config.entrypoint ?? []), ...(config.cmd ?? [])];
  if (argv.length === 0) return null;
  // Root by name when USER is unset: the FROM template's own USER must not apply twice.
  return { argv, env: config.env, workdir: config.workdir, user: isRoot(config.user) ? 'root' : config.user };
}

/** The start step as the build log names it: the command, shortened. */
export function startStepName(spec: StartSpec): string {
  const shell = spec.argv.length === 3 && spec.argv[1] === '-c' ? spec.argv[2]! : null;
  return `start command: ${short(shell ?? JSON.stringify(spec.argv))}`;
}

export const readyStepName = (ready: ReadyCheck): string =>
  `wait until ready: ${ready.port !== null ? `port ${ready.port} accepts connections` : short(ready.command ?? '')}`;

const short = (text: string): string => {
  const oneLine = text.replace(/\s+/g, ' ');
  return oneLine.length > 200 ? `${oneLine.slice(0, 199)}…` : oneLine;
};

/**
 * The command that checks a port from inside the guest, with what the image has: bash's
 * /dev/tcp (IPv4 then IPv6 loopback), else python3, else nc. The port is an integer, checked at
 * the create, so it is safe in the script's text.
 */
export function portCheckArgv(port: number): string[] {
  const p = String(Math.trunc(port));
  const script = [
    `if command -v bash >/dev/null 2>&1; then exec bash -c '(: </dev/tcp/127.0.0.1/${p}) 2>/dev/null || (: </dev/tcp/::1/${p}) 2>/dev/null'; fi`,
    `if command -v python3 >/dev/null 2>&1; then exec python3 -c 'import socket; socket.create_connection(("localhost", ${p}), 5).close()' 2>/dev/null; fi`,
    `if command -v nc >/dev/null 2>&1; then exec nc -z 127.0.0.1 ${p}; fi`,
    `echo 'the image has no bash, python3 or nc to check port ${p} with: give ready_cmd instead' >&2; exit 127`,
  ].join('\n');
  return ['/bin/sh', '-c', script];
}

/**
 * Starts the command and waits until it is ready: the check passes while the command still runs.
 * Fails the build when the command exits first (with its exit code), or when the deadline passes;
 * either way with the tail of the command's output in the log. Without a check, the command only
 * has to be running once started.
 */
export async function startAndWait(vm: BuildVm, spec: StartSpec, ready: ReadyCheck, report: BuildReporter, signal: AbortSignal, clock: ReadyClock = REAL_CLOCK): Promise<void> {
  const env = Object.fromEntries(spec.env);
  const processId = await vm.startProcess(spec.argv, env, spec.workdir, spec.user);
  report.output(`started as process ${processId}\n`);
  const exited = async (): Promise<void> => {
    const code = await vm.exitCodeOf(processId);
    if (code === null) return;
    report.output(await vm.outputTail(processId, TAIL_BYTES));
    throw new BuildFailure(`the start command exited with code ${code} before it was ready`, code);
  };
  const check = ready.port !== null ? portCheckArgv(ready.port) : ready.command !== null ? ['/bin/sh', '-c', ready.command] : null;
  if (check === null) return exited();

  report.step(readyStepName(ready));
  const deadline = clock.now() + ready.timeoutSecs * 1000;
  for (let tries = 1; ; tries++) {
    const result = await checkOnce(vm, check, env, spec, Math.max(1000, Math.min(CHECK_TIMEOUT_MS, deadline - clock.now())), signal);
    if (signal.aborted) throw new BuildFailure('the build was cancelled');
    await exited();
    if (result.code === 0) {
      report.output(`ready after ${tries} ${tries === 1 ? 'check' : 'checks'}\n`);
      return;
    }
    if (clock.now() >= deadline) {
      report.output(`the start command's output:\n${await vm.outputTail(processId, TAIL_BYTES)}\nthe last check ${result.code === null ? 'timed out' : `returned ${result.code}`}${result.output === '' ? '' : `: ${result.output}`}\n`);
      throw new BuildFailure(`the start command was not ready after ${ready.timeoutSecs} s (${tries} checks)`);
    }
    await clock.sleep(Math.min(CHECK_INTERVAL_MS, deadline - clock.now()), signal);
  }
}

/** One check, as the template's USER with its ENV and WORKDIR (as Docker runs a HEALTHCHECK); code null: it timed out. */
async function checkOnce(vm: BuildVm, argv: string[], env: Record<string, string>, spec: StartSpec, timeoutMs: number, signal: AbortSignal): Promise<{ code: number | null; output: string }> {
  const limit = AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]);
  let output = '';
  try {
    const code = await vm.run(argv, env, spec.workdir, spec.user, (text) => {
      output = (output + text).slice(-CHECK_TAIL_BYTES);
    }, limit);
    return { code: limit.aborted ? null : code, output };
  } catch (err) {
    // Stopped at its limit (or with the build): a failed try. Anything else is the build's error.
    if (limit.aborted) return { code: null, output };
    throw err;
  }
}
