/**
 * Buffered commands through the guest agent: guest-exec, then guest-exec-status polled with a
 * backoff that starts at once, so short commands return fast and long ones cost little.
 */
import { VesselError } from '../core/errors.js';
import type { ExecRequest, ExecResult } from '../core/types.js';
import { GuestAgentError, type GuestAgentClient } from './guest-agent-client.js';

// Every 5 ms for the first 40 ms, where most short commands end (a /bin/true takes about 30 ms
// under TCG), then backing off: a long command costs a poll every 250 ms.
const POLL_DELAYS_MS = [0, 2, 3, 5, 5, 5, 5, 5, 5, 5, 10, 20, 40, 80, 150, 250];
const NO_CWD = '\0vessel-nocwd';
const NO_EXEC = '\0vessel-noexec';

/** Where the gateway's CA goes in the guest; update-ca-certificates adds it to the bundle. */
export const GUEST_CA_FILE = '/usr/local/share/ca-certificates/vessel-egress-ca.crt';
const SYSTEM_BUNDLE = '/etc/ssl/certs/ca-certificates.crt';

/** Points OpenSSL, Python requests and Node at the bundle that holds the gateway's CA. */
export const GUEST_CA_ENV: Record<string, string> = {
  SSL_CERT_FILE: SYSTEM_BUNDLE,
  REQUESTS_CA_BUNDLE: SYSTEM_BUNDLE,
  NODE_EXTRA_CA_CERTS: GUEST_CA_FILE,
};

/** The base environment; the request's env is laid over it. */
export const GUEST_BASE_ENV: Record<string, string> = {
  PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
  HOME: '/root',
  LANG: 'C.UTF-8',
  TERM: 'xterm',
  ...GUEST_CA_ENV,
};

/** cd needs a shell; the markers let the host tell "could not start" from the command's own failures. */
const CWD_WRAPPER = `cd -- "$1" 2>/dev/null || { printf '\\0vessel-nocwd' >&2; exit 127; }; shift; command -v -- "$1" >/dev/null 2>&1 || { printf '\\0vessel-noexec' >&2; exit 127; }; exec "$@"`;

/**
 * Kills the command and its descendants, listed first and then killed in one call. It must not
 * SIGSTOP them: they share the agent's process group, and a stopped member of an orphaned group
 * makes the kernel send SIGHUP to the whole group, the agent included.
 */
const TREE_KILL = [
  'walk() { for c in $(pgrep -P "$1"); do echo "$c"; walk "$c"; done; }',
  'pids=$(walk "$1")',
  'kill -KILL "$1" $pids 2>/dev/null',
  'for p in $pids; do kill -KILL $(walk "$p") 2>/dev/null; done; true',
].join('\n');

interface ExecStatus {
  exited: boolean;
  exitcode?: number;
  signal?: number;
  'out-data'?: string;
  'err-data'?: string;
  'out-truncated'?: boolean;
  'err-truncated'?: boolean;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function argv(req: ExecRequest): { path: string; arg: string[] } {
  const direct = req.args.length === 0 ? { path: '/bin/sh', arg: ['-c', req.command] } : { path: req.command, arg: req.args };
  if (req.cwd === null) return direct;
  return { path: '/bin/sh', arg: ['-c', CWD_WRAPPER, 'vessel-exec', req.cwd, direct.path, ...direct.arg] };
}

function capture(b64: string | undefined, agentTruncated: boolean | undefined, max: number): { text: string; truncated: boolean } {
  const bytes = Buffer.from(b64 ?? '', 'base64');
  const truncated = bytes.length > max || agentTruncated === true;
  // toString('utf8') is lossy by design: invalid sequences become U+FFFD.
  return { text: (bytes.length > max ? bytes.subarray(0, max) : bytes).toString('utf8'), truncated };
}

export async function execInGuest(agent: () => Promise<GuestAgentClient>, req: ExecRequest): Promise<ExecResult> {
  const started = Date.now();
  const { path, arg } = argv(req);
  const env = Object.entries({ ...GUEST_BASE_ENV, ...req.env }).map(([k, v]) => `${k}=${v}`);
  let pid: number;
  try {
    const ga = await agent();
    ({ pid } = await ga.call<{ pid: number }>('guest-exec', {
      path,
      arg,
      env,
      'capture-output': true,
      ...(req.stdin === null ? {} : { 'input-data': Buffer.from(req.stdin, 'utf8').toString('base64') }),
    }));
  } catch (err) {
    if (err instanceof GuestAgentError) throw new VesselError('command_failed', `cannot start '${req.args.length === 0 ? '/bin/sh' : req.command}': ${err.desc}`);
    throw err;
  }

  const deadline = started + Math.min(req.timeoutSecs * 1000, 2 ** 31 - 1);
  let status: ExecStatus;
  for (let i = 0; ; i++) {
    const wait = POLL_DELAYS_MS[Math.min(i, POLL_DELAYS_MS.length - 1)]!;
    if (wait > 0) await sleep(Math.min(wait, Math.max(0, deadline - Date.now())));
    status = await (await agent()).call<ExecStatus>('guest-exec-status', { pid });
    if (status.exited) break;
    if (Date.now() >= deadline) {
      await killTree(agent, pid);
      throw new VesselError('deadline_exceeded', `command did not finish within ${req.timeoutSecs} s and was killed`);
    }
  }

  const stderrRaw = Buffer.from(status['err-data'] ?? '', 'base64').toString('latin1');
  if (req.cwd !== null && status.exitcode === 127 && (stderrRaw === NO_CWD || stderrRaw === NO_EXEC)) {
    const what = stderrRaw === NO_CWD ? `working directory '${req.cwd}' does not exist` : `executable '${req.args.length === 0 ? '/bin/sh' : req.command}' was not found`;
    throw new VesselError('command_failed', `cannot start command: ${what}`);
  }
  const stdout = capture(status['out-data'], status['out-truncated'], req.maxOutputBytes);
  const stderr = capture(status['err-data'], status['err-truncated'], req.maxOutputBytes);
  return {
    exit_code: status.signal !== undefined ? 128 + status.signal : (status.exitcode ?? -1),
    duration_ms: Date.now() - started,
    stdout: stdout.text,
    stdout_truncated: stdout.truncated,
    stderr: stderr.text,
    stderr_truncated: stderr.truncated,
  };
}

async function killTree(agent: () => Promise<GuestAgentClient>, pid: number): Promise<void> {
  const ga = await agent();
  const { pid: killer } = await ga.call<{ pid: number }>('guest-exec', { path: '/bin/sh', arg: ['-c', TREE_KILL, 'vessel-kill', String(pid)] });
  for (let i = 0; i < 50; i++) {
    const s = await ga.call<ExecStatus>('guest-exec-status', { pid: killer });
    if (s.exited) break;
    await sleep(20);
  }
  // Collect the killed command so the agent forgets it.
  for (let i = 0; i < 50; i++) {
    const s = await ga.call<ExecStatus>('guest-exec-status', { pid }).catch(() => ({ exited: true }));
    if (s.exited) return;
    await sleep(20);
  }
}
