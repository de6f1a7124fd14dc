/** The Debian packages the driver needs on the host, installed on first start when run as root. */
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
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
};

/** The C library to link the guest's static helper against (guest/vessel-identity.c). */
const STATIC_LIBC = '/usr/lib/x86_64-linux-gnu/libc.a';

function has(binary: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${binary}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export function missingHostPackages(): string[] {
  const missing = Object.entries(HOST_REQUIREMENTS).filter(([bin]) => !has(bin)).map(([, pkg]) => pkg);
  // busybox must be the static build: it runs inside the initramfs with no libc.
  if (!missing.includes('busybox-static') && has('busybox')) {
    const info = execFileSync('sh', ['-c', 'ldd "$(command -v busybox)" 2>&1 || true']).toString();
    if (!/not a dynamic executable|statically linked/.test(info)) missing.push('busybox-static');
  }
  if (!existsSync(STATIC_LIBC)) missing.push('libc6-dev');
  return [...new Set(missing)];
}

export function installCommand(packages: string[]): string {
  return `apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${packages.join(' ')}`;
}

/** Installs what is missing when root; otherwise throws with the exact command to run. */
export async function ensureHostPackages(log: (line: string) => void): Promise<void> {
  const missing = missingHostPackages();
  if (missing.length === 0) return;
  const cmd = installCommand(missing);
  if (process.getuid?.() !== 0) {
    throw new Error(`missing host packages: ${missing.join(', ')}. Run as root:\n  ${cmd}`);
  }
  log(`installing host packages: ${missing.join(', ')}`);
  await runCommand('sh', ['-c', cmd], { env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }, onLine: (l) => log(`  ${l}`) });
}
