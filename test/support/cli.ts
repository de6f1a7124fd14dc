/**
 * Runs the compiled `vessel` CLI as a child process, as a user's shell would: its own HOME and
 * config directory, only the environment the test gives (nothing of the test runner's VESSEL_*),
 * stdin fed and closed. Asynchronous, so that a service in the test's own process can answer it.
 */
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from './service.js';

export const CLI = join(REPO_ROOT, 'dist/src/cli/main.js');

export interface CliResult {
  status: number | null;
  stdout: Buffer;
  stderr: Buffer;
  /** stdout as text, for the commands that print text. */
  out: string;
  err: string;
}

export interface CliUser {
  /** HOME and XDG_CONFIG_HOME live here. */
  home: string;
  env: Record<string, string>;
  run(args: string[], options?: { input?: string | Buffer; env?: Record<string, string>; cwd?: string }): Promise<CliResult>;
  /** Starts the CLI with its stdin left open, for a test that writes it as it goes. */
  start(args: string[], options?: { env?: Record<string, string> }): RunningCli;
}

/** A CLI still running: its stdin to write and end, its output so far, and its end. */
export interface RunningCli {
  child: ChildProcessWithoutNullStreams;
  stdout(): Buffer;
  stderr(): Buffer;
  /** Resolves with the match once stdout (as text) matches; rejects if the CLI ends first. */
  waitForOut(pattern: RegExp): Promise<RegExpMatchArray>;
  result: Promise<CliResult>;
}

/** A user with an empty home; `env` is added to every run (VESSEL_URL, VESSEL_TOKEN, …). */
export function cliUser(env: Record<string, string> = {}): CliUser {
  const home = mkdtempSync(join(tmpdir(), 'vessel-cli-home-'));
  const base = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: home, XDG_CONFIG_HOME: join(home, '.config'), ...env };
  return {
    home,
    env: base,
    run(args, options = {}) {
      const child = spawn(process.execPath, [CLI, ...args], { env: { ...base, ...options.env }, cwd: options.cwd ?? home, stdio: ['pipe', 'pipe', 'pipe'] });
      const stdout: Buffer[] = [];
      const stderr: Buffer[] = [];
      child.stdout.on('data', (c: Buffer) => stdout.push(c));
      child.stderr.on('data', (c: Buffer) => stderr.push(c));
      child.stdin.on('error', () => undefined); // a command that never reads its stdin
      child.stdin.end(options.input ?? '');
      return new Promise((resolve, reject) => {
        child.on('error', reject);
        child.on('close', (status) => {
          const [out, err] = [Buffer.concat(stdout), Buffer.concat(stderr)];
          resolve({ status, stdout: out, stderr: err, out: out.toString('utf8'), err: err.toString('utf8') });
        });
      });
    },
    start(args, options = {}) {
      const child = spawn(process.execPath, [CLI, ...args], { env: { ...base, ...options.env }, cwd: home, stdio: ['pipe', 'pipe', 'pipe'] });
      const stdout: Buffer[] = [];
      const stderr: Buffer[] = [];
      const waiters = new Set<() => void>();
      const changed = () => waiters.forEach((w) => w());
      child.stdout.on('data', (c: Buffer) => (stdout.push(c), changed()));
      child.stderr.on('data', (c: Buffer) => stderr.push(c));
      child.stdin.on('error', () => undefined);
      const result = new Promise<CliResult>((resolve, reject) => {
        child.on('error', reject);
        child.on('close', (status) => {
          const [out, err] = [Buffer.concat(stdout), Buffer.concat(stderr)];
          resolve({ status, stdout: out, stderr: err, out: out.toString('utf8'), err: err.toString('utf8') });
          changed();
        });
      });
      let closed = false;
      void result.then(() => (closed = true));
      return {
        child,
        stdout: () => Buffer.concat(stdout),
        stderr: () => Buffer.concat(stderr),
        result,
        waitForOut(pattern) {
          return new Promise((resolve, reject) => {
            const check = () => {
              const match = Buffer.concat(stdout).toString('utf8').match(pattern);
              if (match !== null) resolve(match);
              else if (closed || child.exitCode !== null) reject(new Error(`the CLI ended before its stdout matched ${pattern}: ${Buffer.concat(stderr).toString('utf8')}`));
              else return;
              waiters.delete(check);
            };
            waiters.add(check);
            check();
          });
        },
      };
    },
  };
}
