/**
 * Commands as vessel-agent's SPAWN takes them (docs/agent-protocol.md): the argv, the guest's
 * base environment with the request's laid over it, a script for a command too large for one
 * frame, and the agent's refusals to start as the API's errors. Running, streaming, buffering
 * and the deadline are the core's (core/commands.ts), the same for every exec.
 */
import { randomBytes } from 'node:crypto';
import { VesselError } from '../core/errors.js';
import { isRoot, resolveUser, UserError } from '../core/guest-users.js';
import type { ExecRequest } from '../core/types.js';
import { AgentError, type AgentClient } from './agent/agent-client.js';
import { MAX_PAYLOAD, SPAWN_FIXED_BYTES } from './agent/frames.js';
import { SPAWN_MAX_GROUPS, type SpawnUser } from './agent/messages.js';
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

/** A command as the API takes it: the shell form (no args) or argv, with its cwd, env and user. */
export type CommandRequest = Pick<ExecRequest, 'command' | 'args' | 'cwd' | 'env' | 'user'>;

/** What SPAWN carries for a command. */
export interface SpawnPlan {
  argv: string[];
  env: string[];
  cwd: string;
  /** Absent: the agent's own user, root. */
  user?: SpawnUser;
}

const cBytes = (s: string): number => Buffer.byteLength(s) + 1;
const spawnBytes = (p: SpawnPlan): number =>
  SPAWN_FIXED_BYTES + cBytes(p.cwd) + [...p.argv, ...p.env].reduce((n, s) => n + cBytes(s), 0) + (p.user === undefined ? 0 : 10 + 4 * p.user.groups.length);

/** /etc/passwd and /etc/group are read whole to find a user: larger ones are refused, not parsed. */
const MAX_ACCOUNT_FILE_BYTES = 1024 * 1024;

/** A guest file's text, or null when it does not exist; refused past `maxBytes`. */
async function guestText(agent: AgentClient, path: string, maxBytes: number): Promise<string | null> {
  let stream;
  try {
    ({ stream } = await agent.readFile(path));
  } catch (err) {
    if (err instanceof AgentError && err.errno === ENOENT) return null;
    throw agentFailure(err);
  }
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of stream) {
    total += (chunk as Buffer).length;
    if (total > maxBytes) {
      stream.destroy();
      throw new VesselError('command_failed', `cannot start command: the guest's ${path} is larger than ${maxBytes} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}

/**
 * The ids `spec` names in the guest's own account files, as `docker exec --user` finds them, and
 * the user's home for HOME; null for root, which the agent already is.
 */
async function spawnUserOf(agent: AgentClient, spec: string): Promise<{ user: SpawnUser; home: string | null } | null> {
  if (isRoot(spec)) return null;
  const [passwd, group] = [await guestText(agent, '/etc/passwd', MAX_ACCOUNT_FILE_BYTES), await guestText(agent, '/etc/group', MAX_ACCOUNT_FILE_BYTES)];
  try {
    const found = resolveUser(spec, passwd, group);
    if (found.groups.length > SPAWN_MAX_GROUPS) throw new UserError(`user '${spec}' is in ${found.groups.length} groups; commands take at most ${SPAWN_MAX_GROUPS}`);
    return { user: { uid: found.uid, gid: found.gid, groups: found.groups }, home: found.home };
  } catch (err) {
    if (err instanceof UserError) throw new VesselError('command_failed', `cannot start command: ${err.message}`);
    throw err;
  }
}

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
  const as = req.user === undefined || req.user === null ? null : await spawnUserOf(agent, req.user);
  // A user's HOME is its own, as login and `docker exec --user` give it, unless the request sets one.
  const home = as === null ? {} : { HOME: as.home ?? '/' };
  const plan: SpawnPlan = {
    argv: req.args.length === 0 ? ['/bin/sh', '-c', req.command] : [req.command, ...req.args],
    env: Object.entries({ ...GUEST_BASE_ENV, ...home, ...req.env }).map(([k, v]) => `${k}=${v}`),
    cwd: req.cwd ?? '',
    ...(as === null ? {} : { user: as.user }),
  };
  if (spawnBytes(plan) <= MAX_PAYLOAD) return plan;
  // The staged script is root's alone (it holds the env), in a directory only root writes: a user
  // could neither read nor remove it.
  if (plan.user !== undefined) throw new VesselError('invalid_argument', `a command and env of more than ${MAX_PAYLOAD} bytes run as root only; pass the rest as a file`);
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
  if (err.kind === 'USER') return new VesselError('command_failed', `cannot start command as user '${req.user}': ${err.detail}`);
  return new VesselError('command_failed', `cannot start '${programOf(req)}': ${err.detail}`);
}
