/**
 * Commands as vessel-agent's SPAWN takes them (docs/agent-protocol.md): the argv, the guest's
 * base environment with the request's laid over it, a script for a command too large for one
 * frame, and the agent's refusals to start as the API's errors. Running, streaming, buffering
 * and the deadline are the core's (core/commands.ts), the same for every exec.
 */
import { randomBytes } from 'node:crypto';
import { VesselError } from '../core/errors.js';
import type { ExecRequest } from '../core/types.js';
import { AgentError, type AgentClient } from './agent/agent-client.js';
import { MAX_PAYLOAD, SPAWN_FIXED_BYTES } from './agent/frames.js';
import { agentFailure } from './guest-errors.js';

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

const ENOENT = 2;
/** Where a command too large for one SPAWN frame is staged (tmpfs; the script removes itself). */
const STAGING_DIR = '/run/vessel';

/** A command as the API takes it: the shell form (no args) or argv, with its cwd and env. */
export type CommandRequest = Pick<ExecRequest, 'command' | 'args' | 'cwd' | 'env'>;

/** What SPAWN carries for a command. */
export interface SpawnPlan {
  argv: string[];
  env: string[];
  cwd: string;
}

const cBytes = (s: string): number => Buffer.byteLength(s) + 1;
const spawnBytes = (p: SpawnPlan): number => SPAWN_FIXED_BYTES + cBytes(p.cwd) + [...p.argv, ...p.env].reduce((n, s) => n + cBytes(s), 0);

/** POSIX sh quoting: anything but a NUL (which argv and env cannot hold) survives it. */
const shQuote = (s: string): string => `'${s.replaceAll("'", `'\\''`)}'`;

/** What the request names: `sh -c` for the shell form (no args), the program itself for the argv form. */
const programOf = (req: CommandRequest): string => (req.args.length === 0 ? '/bin/sh' : req.command);

/**
 * A SPAWN frame holds at most MAX_PAYLOAD bytes, and the API takes a command (and env values) of
 * up to 128 KiB, the kernel's limit for one argument. Such a command is written to a script on
 * the guest's tmpfs first, which removes itself and execs it through `env -i` with the same argv
 * and environment: one more request, only for requests this large.
 */
export async function spawnPlan(agent: AgentClient, req: CommandRequest): Promise<SpawnPlan> {
  const plan: SpawnPlan = {
    argv: req.args.length === 0 ? ['/bin/sh', '-c', req.command] : [req.command, ...req.args],
    env: Object.entries({ ...GUEST_BASE_ENV, ...req.env }).map(([k, v]) => `${k}=${v}`),
    cwd: req.cwd ?? '',
  };
  if (spawnBytes(plan) <= MAX_PAYLOAD) return plan;
  const script = `${STAGING_DIR}/exec-${randomBytes(8).toString('hex')}.sh`;
  const text = `rm -f ${shQuote(script)}\nexec /usr/bin/env -i -- ${[...plan.env, ...plan.argv].map(shQuote).join(' ')}\n`;
  await agent.writeFile(script, Buffer.from(text), { mkdirs: true, mode: 0o600 });
  return { argv: ['/bin/sh', script], env: [`PATH=${GUEST_BASE_ENV.PATH}`], cwd: plan.cwd };
}

/** A command that could not start is the caller's command_failed, saying which step failed. */
export function startFailure(err: unknown, req: CommandRequest): unknown {
  if (!(err instanceof AgentError)) return agentFailure(err);
  if (err.kind === 'LIMIT') return new VesselError('failed_precondition', `the guest runs as many processes as it keeps (128); forget exited ones: ${err.detail}`);
  if (err.kind === 'CWD') {
    const why = err.errno === ENOENT ? 'does not exist' : `cannot be entered (${err.detail})`;
    return new VesselError('command_failed', `cannot start command: working directory '${req.cwd}' ${why}`);
  }
  if (err.kind === 'EXEC') return new VesselError('command_failed', `cannot start '${programOf(req)}': executable was not found or cannot be run (${err.detail})`);
  return new VesselError('command_failed', `cannot start '${programOf(req)}': ${err.detail}`);
}
