/**
 * A throwaway PostgreSQL cluster for tests: Debian's `postgresql` binaries, initdb and pg_ctl in a
 * temp directory, run as the unprivileged `postgres` user when the tests run as root (PostgreSQL
 * refuses to run as root), listening only on a unix socket inside that directory. Not installed
 * is an error, never a skip: CI installs the package (.ci/run).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

const PG_ROOT = '/usr/lib/postgresql';

/** The newest installed major version's bin directory. */
export function postgresBinDir(): string {
  const versions = existsSync(PG_ROOT)
    ? readdirSync(PG_ROOT)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(PG_ROOT, v, 'bin', 'pg_ctl')))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  if (versions.length === 0) throw new Error(`PostgreSQL is not installed (no ${PG_ROOT}/<version>/bin/pg_ctl): apt-get install postgresql`);
  return join(PG_ROOT, versions[0]!, 'bin');
}

export interface PostgresCluster {
  /** A URL for a database of its own, made fresh: each test gets an empty schema. */
  createDatabase(name: string): Promise<string>;
  /** Stops the server, its files kept, as an outage or a failover does: every connection is cut. */
  pause(): void;
  /** Starts the paused server again on the same socket and data. */
  resume(): void;
  /** Stops the server and removes its files. Idempotent. */
  stop(): void;
}

export interface PostgresClusterOptions {
  /** fsync on, as in production: for benchmarks. Tests leave it off (the cluster is thrown away). */
  durable?: boolean;
}

export function startPostgres(options: PostgresClusterOptions = {}): PostgresCluster {
  const bin = postgresBinDir();
  const dir = mkdtempSync(join(tmpdir(), 'vessel-pg-'));
  const data = join(dir, 'data');
  const asRoot = process.getuid?.() === 0;
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim());
    chownSync(dir, uid, gid);
  }
  // Others may pass through to the socket, not list the directory: the service's API process
  // runs as its own user (vessel-api), as it does against /var/run/postgresql.
  chmodSync(dir, 0o711);
  const run = (program: string, args: string[]): void => {
    const [cmd, argv] = asRoot ? ['runuser', ['-u', 'postgres', '--', join(bin, program), ...args]] : [join(bin, program), args];
    const r = spawnSync(cmd, argv, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`${program} failed (${r.status ?? r.signal}): ${r.stderr || r.stdout}`);
  };
  let stopped = false;
  // Interrupted (Ctrl-C, the runner's SIGTERM): stop the server, then die of the signal as before.
  const onSignal = (signal: NodeJS.Signals): void => {
    stop();
    process.kill(process.pid, signal);
  };
  const stop = (): void => {
    if (stopped) return;
    stopped = true;
    process.off('exit', stop);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (existsSync(join(data, 'postmaster.pid'))) spawnSync(asRoot ? 'runuser' : join(bin, 'pg_ctl'), [...(asRoot ? ['-u', 'postgres', '--', join(bin, 'pg_ctl')] : []), '-D', data, '-m', 'immediate', '-w', 'stop']);
    rmSync(dir, { recursive: true, force: true });
  };
  // A test that throws past its after() hook must not leave a server behind.
  process.on('exit', stop);
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  // No TCP at all: the socket sits in the cluster's directory. fsync off: a test cluster that
  // crashes is thrown away anyway, and it keeps the tests off the shared disk's queue.
  const settings = `-k ${dir} -c listen_addresses='' -c fsync=${options.durable === true ? 'on' : 'off'} -c max_connections=200`;
  const start = (): void => run('pg_ctl', ['-D', data, '-l', join(dir, 'log'), '-o', settings, '-w', '-t', '60', 'start']);
  try {
    run('initdb', ['-D', data, '-U', 'vessel', '-A', 'trust', '--no-sync', '-E', 'UTF8', '--locale=C']);
    start();
  } catch (err) {
    stop();
    throw err;
  }
  const urlFor = (db: string): string => `postgresql://vessel@/${db}?host=${encodeURIComponent(dir)}`;
  return {
    async createDatabase(name) {
      const client = new pg.Client({ connectionString: urlFor('postgres') });
      await client.connect();
      try {
        await client.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
      } finally {
        await client.end();
      }
      return urlFor(name);
    },
    pause: () => run('pg_ctl', ['-D', data, '-m', 'fast', '-w', 'stop']),
    resume: start,
    stop,
  };
}
