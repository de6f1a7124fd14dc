/**
 * A throwaway S3 server for tests: Ceph's RADOS Gateway (Debian 12's `radosgw`, Ceph 16) over a
 * single-node Ceph cluster in a temp directory: one monitor, one OSD on memstore (objects in its
 * memory, nothing on disk), and radosgw on loopback, with a user made by radosgw-admin. No
 * manager daemon: nothing the gateway does needs one. Not installed is an error, never a skip:
 * CI installs the packages (.ci/run: ceph-mon ceph-osd radosgw ceph-common).
 *
 * Every daemon runs in the foreground as a child of this process, so stop() ends exactly them.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';

export interface S3Server {
  /** `http://127.0.0.1:<port>`: path-style addressing. */
  endpoint: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** The daemons' logs, for a failing test's message. */
  dir: string;
  /** Ends the daemons and removes their files. Idempotent. */
  stop(): void;
}

const BINARIES = ['ceph-mon', 'ceph-osd', 'radosgw', 'radosgw-admin', 'ceph', 'ceph-authtool', 'monmaptool'];

async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

export async function startRadosGateway(): Promise<S3Server> {
  const missing = BINARIES.filter((b) => !['/usr/bin', '/usr/sbin'].some((d) => existsSync(join(d, b))));
  if (missing.length > 0) throw new Error(`Ceph is not installed (no ${missing.join(', ')}): apt-get install ceph-mon ceph-osd radosgw ceph-common`);
  const dir = mkdtempSync(join(tmpdir(), 'vessel-ceph-'));
  const monPort = await freePort();
  let rgwPort = await freePort();
  while (rgwPort === monPort) rgwPort = await freePort();
  const conf = join(dir, 'ceph.conf');
  const keyring = join(dir, 'keyring');
  for (const sub of ['run', 'log', 'mon.a', 'osd.0']) mkdirSync(join(dir, sub));
  writeFileSync(
    conf,
    [
      '[global]',
      `fsid = ${randomUUID()}`,
      `mon host = v2:127.0.0.1:${monPort}`,
      'mon initial members = a',
      `keyring = ${keyring}`,
      'public addr = 127.0.0.1',
      'ms bind ipv6 = false',
      // One OSD: every pool has one copy, and a handful of placement groups.
      'osd pool default size = 1',
      'osd pool default min size = 1',
      'osd pool default pg num = 8',
      'osd pool default pgp num = 8',
      'osd crush chooseleaf type = 0',
      'mon allow pool size one = true',
      'mon warn on pool no redundancy = false',
      'mon data avail warn = 1',
      'osd objectstore = memstore',
      'memstore device bytes = 1073741824',
      `run dir = ${dir}/run`,
      `log file = ${dir}/log/$name.log`,
      `admin socket = ${dir}/run/$name.asok`,
      `mon data = ${dir}/mon.$id`,
      `osd data = ${dir}/osd.$id`,
      '',
    ].join('\n'),
  );
  const children: ChildProcess[] = [];
  let stopped = false;
  const stop = (): void => {
    if (stopped) return;
    stopped = true;
    process.off('exit', stop);
    for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  };
  process.on('exit', stop);
  const run = (program: string, args: string[]): string => {
    const r = spawnSync(program, ['-c', conf, ...args], { encoding: 'utf8', timeout: 60_000 });
    if (r.status !== 0) throw new Error(`${program} ${args.join(' ')} failed (${r.status ?? r.signal}): ${r.stderr || r.stdout}`);
    return r.stdout;
  };
  const daemon = (program: string, args: string[]): void => {
    const child = spawn(program, ['-c', conf, '-f', ...args], { stdio: 'ignore' });
    child.on('error', () => undefined);
    children.push(child);
  };
  try {
    const authtool = (args: string[]): void => {
      const r = spawnSync('ceph-authtool', args, { encoding: 'utf8' });
      if (r.status !== 0) throw new Error(`ceph-authtool failed: ${r.stderr}`);
    };
    // One keyring for all: the monitor imports every key in it at --mkfs.
    authtool(['--create-keyring', keyring, '--gen-key', '-n', 'mon.', '--cap', 'mon', 'allow *']);
    authtool([keyring, '--gen-key', '-n', 'client.admin', '--cap', 'mon', 'allow *', '--cap', 'osd', 'allow *', '--cap', 'mgr', 'allow *']);
    authtool([keyring, '--gen-key', '-n', 'osd.0', '--cap', 'mon', 'allow profile osd', '--cap', 'osd', 'allow *']);
    authtool([keyring, '--gen-key', '-n', 'client.rgw', '--cap', 'mon', 'allow rw', '--cap', 'osd', 'allow rwx']);
    const monmap = join(dir, 'monmap');
    const r = spawnSync('monmaptool', ['--create', '--addv', 'a', `[v2:127.0.0.1:${monPort}]`, '--fsid', readFileSync(conf, 'utf8').match(/fsid = (\S+)/)![1]!, monmap], { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`monmaptool failed: ${r.stderr}`);
    run('ceph-mon', ['--mkfs', '-i', 'a', '--monmap', monmap, '--keyring', keyring]);
    daemon('ceph-mon', ['-i', 'a']);
    const osdUuid = randomUUID();
    // `ceph` waits for the monitor to answer.
    const id = run('ceph', ['--connect-timeout', '30', 'osd', 'new', osdUuid]).trim();
    if (id !== '0') throw new Error(`the monitor gave the OSD id ${id}, not 0`);
    run('ceph-osd', ['-i', '0', '--mkfs', '--osd-uuid', osdUuid]);
    daemon('ceph-osd', ['-i', '0']);
    const endpoint = await startGateway(rgwPort);
    async function startGateway(port: number, attempt = 1): Promise<string> {
      const logFile = join(dir, 'log', 'client.rgw.log');
      const logStart = existsSync(logFile) ? readFileSync(logFile).length : 0;
      const gateway = spawn('radosgw', ['-c', conf, '-f', '-n', 'client.rgw', '--rgw-frontends', `beast endpoint=127.0.0.1:${port}`], { stdio: 'ignore' });
      gateway.on('error', () => undefined);
      children.push(gateway);
      const url = `http://127.0.0.1:${port}`;
      // The gateway makes its pools before it listens. Ready is an S3 answer while it runs: the
      // port was free a moment ago, and another process may have taken it since.
      for (let tries = 0; ; tries++) {
        const s3 = await fetch(url).then(async (res) => (await res.text()).includes('ListAllMyBucketsResult'), () => false);
        if (gateway.exitCode !== null || gateway.signalCode !== null) {
          const log = existsSync(logFile) ? readFileSync(logFile).subarray(logStart).toString('utf8') : '';
          children.splice(children.indexOf(gateway), 1);
          if (attempt < 3 && log.includes('Address already in use')) return startGateway(await freePort(), attempt + 1);
          throw new Error(`radosgw exited while starting; its log: ${join(dir, 'log')}`);
        }
        if (s3) return url;
        if (tries === 360) throw new Error(`radosgw did not answer on ${url} within 90 s; its log: ${join(dir, 'log')}`);
        if (children.some((c) => c.exitCode !== null)) throw new Error(`a Ceph daemon exited while starting; logs in ${join(dir, 'log')}`);
        await sleep(250);
      }
    }
    const accessKeyId = `VESSEL${randomBytes(7).toString('hex').toUpperCase()}`;
    const secretAccessKey = randomBytes(20).toString('hex');
    run('radosgw-admin', ['-n', 'client.admin', 'user', 'create', '--uid=vessel', '--display-name=vessel', `--access-key=${accessKeyId}`, `--secret-key=${secretAccessKey}`]);
    return { endpoint, accessKeyId, secretAccessKey, dir, stop };
  } catch (err) {
    const logs = join(dir, 'log');
    const tail = existsSync(join(logs, 'client.rgw.log')) ? readFileSync(join(logs, 'client.rgw.log'), 'utf8').slice(-2000) : '';
    stop();
    throw new Error(`${(err as Error).message}${tail === '' ? '' : `\nradosgw's log ends:\n${tail}`}`, { cause: err });
  }
}
