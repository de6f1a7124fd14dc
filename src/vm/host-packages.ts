/**
 * The Debian packages the driver needs on the host, installed on first start when run as root.
 *
 * QEMU must be 10.0 or newer: forks map their checkpoint's RAM with `readonly=on,rom=off`, so the
 * kernel refuses every write to the file (QEMU 7.2 punched holes into it when a fork's balloon
 * inflated), and QEMU 10 drops to its uid with `-run-with user=`. Debian 13 ships QEMU 10; on
 * Debian 12 it comes from bookworm-backports, through an APT source of our own pinned to the
 * QEMU packages alone, so nothing else on the host moves to backports.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { runCommand } from '../platform/run-command.js';

/** binary → package that provides it */
export const HOST_REQUIREMENTS: Record<string, string> = {
  'qemu-system-x86_64': 'qemu-system-x86',
  'qemu-img': 'qemu-utils',
  debootstrap: 'debootstrap',
  'mkfs.ext4': 'e2fsprogs',
  cpio: 'cpio',
  busybox: 'busybox-static',
  nft: 'nftables',
  'dpkg-deb': 'dpkg',
  ip: 'iproute2',
  gcc: 'gcc',
  // The gateway flushes a deleted runtime's connection tracking entries (src/net/conntrack.ts).
  conntrack: 'conntrack',
  // Templates (docs/templates.md): skopeo fetches images; the guest kit carries tini's static build.
  skopeo: 'skopeo',
  'tini-static': 'tini',
};

export const MIN_QEMU = { major: 10, minor: 0 };
const QEMU_PACKAGES = ['qemu-system-x86', 'qemu-utils'];

/** The C library the guest agent is linked against, statically (`agentGccArgs` in src/vm/agent/build.ts). */
const STATIC_LIBC = '/usr/lib/x86_64-linux-gnu/libc.a';

const APT_SOURCES_DIR = '/etc/apt/sources.list.d';
const BACKPORTS_SOURCE = join(APT_SOURCES_DIR, 'vessel-bookworm-backports.sources');
const BACKPORTS_PIN = '/etc/apt/preferences.d/vessel-qemu';
/** QEMU and what it needs newer than bookworm has; backports stays at its default priority for everything else. */
const BACKPORTS_PIN_TEXT = `# Written by Vessel: QEMU ${MIN_QEMU.major} from bookworm-backports (see src/vm/host-packages.ts).
Package: qemu-system-x86 qemu-system-common qemu-system-data qemu-utils qemu-block-extra seabios libbrlapi0.8
Pin: release n=bookworm-backports
Pin-Priority: 500
`;
const BACKPORTS_SOURCE_TEXT = `# Written by Vessel for QEMU ${MIN_QEMU.major}; only the packages in ${BACKPORTS_PIN} are taken from it.
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
`;

function has(binary: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** `QEMU emulator version 10.0.2 (Debian …)` → [10, 0], or null when QEMU is missing. */
export function qemuVersion(): { major: number; minor: number; text: string } | null {
  try {
    const text = execFileSync('qemu-system-x86_64', ['--version']).toString().split('\n')[0] ?? '';
    const m = /version (\d+)\.(\d+)/.exec(text);
    return m === null ? null : { major: Number(m[1]), minor: Number(m[2]), text };
  } catch {
    return null;
  }
}

const qemuRecentEnough = (v: { major: number; minor: number }): boolean => v.major > MIN_QEMU.major || (v.major === MIN_QEMU.major && v.minor >= MIN_QEMU.minor);

export function missingHostPackages(): string[] {
  const missing = Object.entries(HOST_REQUIREMENTS).filter(([bin]) => !has(bin)).map(([, pkg]) => pkg);
  // busybox must be the static build: it runs inside the initramfs with no libc.
  if (!missing.includes('busybox-static') && has('busybox')) {
    const info = execFileSync('sh', ['-c', 'ldd "$(command -v busybox)" 2>&1 || true']).toString();
    if (!/not a dynamic executable|statically linked/.test(info)) missing.push('busybox-static');
  }
  if (!existsSync(STATIC_LIBC)) missing.push('libc6-dev');
  const qemu = qemuVersion();
  // Both come from the same release, so that qemu-img writes what this QEMU reads.
  if ((qemu !== null && !qemuRecentEnough(qemu)) || missing.some((p) => QEMU_PACKAGES.includes(p))) missing.push(...QEMU_PACKAGES);
  return [...new Set(missing)];
}

function osCodename(): string | null {
  try {
    return /^VERSION_CODENAME=(\S+)$/m.exec(readFileSync('/etc/os-release', 'utf8'))?.[1] ?? null;
  } catch {
    return null;
  }
}

/** Whether some APT source already names bookworm-backports (ours or the operator's). */
function hasBackportsSource(): boolean {
  const files = ['/etc/apt/sources.list', ...(existsSync(APT_SOURCES_DIR) ? readdirSync(APT_SOURCES_DIR).map((f) => join(APT_SOURCES_DIR, f)) : [])];
  return files.some((f) => {
    try {
      return /^[^#]*bookworm-backports/m.test(readFileSync(f, 'utf8'));
    } catch {
      return false;
    }
  });
}

/** What has to be written before apt can install a recent enough QEMU here, if anything. */
function backportsSetup(packages: string[]): Array<{ path: string; text: string }> {
  if (osCodename() !== 'bookworm' || !packages.some((p) => QEMU_PACKAGES.includes(p))) return [];
  return [
    ...(hasBackportsSource() ? [] : [{ path: BACKPORTS_SOURCE, text: BACKPORTS_SOURCE_TEXT }]),
    ...(existsSync(BACKPORTS_PIN) ? [] : [{ path: BACKPORTS_PIN, text: BACKPORTS_PIN_TEXT }]),
  ];
}

/**
 * How long a start waits for another apt to finish. A fresh cloud host runs apt at first boot
 * (unattended-upgrades, cloud-init) for minutes at a time, holding dpkg's lock; apt-get without
 * a timeout fails at once with "Could not get lock /var/lib/dpkg/lock-frontend". Bounded, so
 * that a stuck apt is reported rather than waited on forever.
 */
export const APT_LOCK_TIMEOUT_SECS = 600;
export const DPKG_FRONTEND_LOCK = '/var/lib/dpkg/lock-frontend';
export const APT_LISTS_LOCK = '/var/lib/apt/lists/lock';

/**
 * apt-get's arguments with the wait for dpkg's locks (lock-frontend and lock). apt 2.6 applies
 * DPkg::Lock::Timeout to those alone: `apt-get update`'s lists lock fails at once whatever it
 * says, so runApt() retries on that one itself.
 */
export function aptGetArgs(args: string[], lockTimeoutSecs = APT_LOCK_TIMEOUT_SECS): string[] {
  return ['-o', `DPkg::Lock::Timeout=${Math.max(0, Math.ceil(lockTimeoutSecs))}`, ...args];
}

const aptGetLine = (args: string[]): string => ['apt-get', ...aptGetArgs(args)].join(' ');
const installArgs = (packages: string[]): string[] => ['install', '-y', '--no-install-recommends', ...packages];

/** The commands an operator runs as root, shown when we are not; the same that ensureHostPackages() runs. */
export function installCommand(packages: string[]): string {
  return `${aptGetLine(['update'])} && DEBIAN_FRONTEND=noninteractive ${aptGetLine(installArgs(packages))}`;
}

/**
 * The process holding a POSIX lock on `path`, from /proc/locks (apt and dpkg lock with fcntl),
 * or null. Only to tell the operator what we wait for; apt itself decides.
 */
export function lockHolder(path: string, procLocks?: string): { pid: number; command: string } | null {
  let text = procLocks;
  let ino: bigint;
  try {
    ino = statSync(path, { bigint: true }).ino;
    text ??= readFileSync('/proc/locks', 'utf8');
  } catch {
    return null;
  }
  // `1: POSIX  ADVISORY  WRITE 4242 fe:00:402117 0 EOF`: pid, then major:minor:inode.
  for (const m of text.matchAll(/^\d+:\s+(?:->\s+)?POSIX\s+\S+\s+WRITE\s+(\d+)\s+[0-9a-f]+:[0-9a-f]+:(\d+)\s/gm)) {
    if (BigInt(m[2]!) !== ino) continue;
    const pid = Number(m[1]);
    let command = '?';
    try {
      command = readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    } catch {
      // gone already, or another pid namespace's
    }
    return { pid, command };
  }
  return null;
}

/**
 * apt's error "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 1187 (python3)";
 * an error line only: its progress says "Waiting for cache lock: Could not get lock …" while it
 * waits, and whatever fails after that wait is not a lock failure.
 */
const LOCK_FAILURE = /^E: Could not get lock (\S+?)\.? It is held by process (\d+)(?: \(([^)]*)\))?|^E: Could not get lock (\S+?)\.?$/m;

export interface AptRunOptions {
  log: (line: string) => void;
  /** When to give up waiting for another apt (ms since the epoch). */
  deadline: number;
  /** Runs apt-get with these arguments; runCommand's failure carries its output's tail. */
  run?: (args: string[]) => Promise<string>;
  /** Between attempts while a lock apt does not wait for is held. */
  retryDelayMs?: number;
}

const runAptGet = (args: string[]): Promise<string> => runCommand('apt-get', args, { env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' } });

/**
 * apt-get `args`, waiting until `deadline` for another apt: for dpkg's locks apt waits itself
 * (DPkg::Lock::Timeout, the time left); for the lists lock it is run again while apt says that
 * lock is held. Each wait is said once on the progress line, with the process waited for.
 */
export async function runApt(args: string[], opts: AptRunOptions): Promise<string> {
  const run = opts.run ?? runAptGet;
  const said = new Set<string>();
  const say = (lock: string, holder: string) => {
    if (said.has(lock + holder)) return;
    said.add(lock + holder);
    const minutes = Math.max(1, Math.round((opts.deadline - Date.now()) / 60_000));
    opts.log(`waiting for ${holder} to release ${lock} (another apt, as at a cloud host's first boot), up to ${minutes} min`);
  };
  for (;;) {
    for (const lock of [DPKG_FRONTEND_LOCK, APT_LISTS_LOCK]) {
      const holder = lockHolder(lock);
      if (holder !== null) say(lock, `${holder.command} (pid ${holder.pid})`);
    }
    try {
      return await run(aptGetArgs(args, (opts.deadline - Date.now()) / 1000));
    } catch (err) {
      const m = LOCK_FAILURE.exec(err instanceof Error ? err.message : String(err));
      if (m === null || Date.now() >= opts.deadline) throw err;
      say(m[1] ?? m[4]!, m[2] === undefined ? 'another process' : `${m[3] ?? '?'} (pid ${m[2]})`);
      await new Promise((r) => setTimeout(r, opts.retryDelayMs ?? 2000));
    }
  }
}

/** Installs what is missing when root; otherwise throws with the exact commands to run. */
export async function ensureHostPackages(log: (line: string) => void): Promise<void> {
  const missing = missingHostPackages();
  if (missing.length === 0) return;
  const files = backportsSetup(missing);
  const cmd = installCommand(missing);
  if (process.getuid?.() !== 0) {
    const writes = files.map((f) => `cat > ${f.path} <<'EOF'\n${f.text}EOF\n`).join('');
    throw new Error(`missing host packages: ${missing.join(', ')} (QEMU ${MIN_QEMU.major}.${MIN_QEMU.minor} or newer). Run as root:\n${writes}  ${cmd}`);
  }
  for (const f of files) {
    log(`adding ${f.path}`);
    writeFileSync(f.path, f.text, { mode: 0o644 });
  }
  log(`installing host packages: ${missing.join(', ')} (if another apt is running, waiting up to ${APT_LOCK_TIMEOUT_SECS / 60} min for it)`);
  const deadline = Date.now() + APT_LOCK_TIMEOUT_SECS * 1000;
  // While it waits for dpkg's lock apt says "Waiting for cache lock: … held by process N (…)"
  // about once a second: shown once, until it says something else.
  let last = '';
  const onLine = (line: string) => {
    if (line !== last) log(`  ${line}`);
    last = line;
  };
  const run = (args: string[]) => runCommand('apt-get', args, { env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }, onLine });
  await runApt(['update'], { log, deadline, run });
  await runApt(installArgs(missing), { log, deadline, run });
  const qemu = qemuVersion();
  if (qemu === null || !qemuRecentEnough(qemu)) {
    throw new Error(`QEMU ${MIN_QEMU.major}.${MIN_QEMU.minor} or newer is needed, and apt installed ${qemu?.text ?? 'none'}: on Debian 12 it comes from bookworm-backports, on Debian 13 from the release itself`);
  }
}
