/**
 * Chooses the accelerator. /dev/kvm can exist and still run guests far slower than TCG (nested
 * hosts), so KVM is used only if a probe boot under it finishes quickly. The verdict is cached
 * per kernel and QEMU version, and VESSEL_ACCEL overrides it.
 */
import { spawn } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync, writeFileSync } from 'node:fs';

export type Accel = 'kvm' | 'tcg';

/** A fast KVM boots the kernel to its "no root" panic in well under a second; TCG takes about 2 s. */
const KVM_PROBE_LIMIT_MS = 1500;

export interface AccelChoice {
  accel: Accel;
  reason: string;
}

function kvmUsable(): boolean {
  try {
    accessSync('/dev/kvm', constants.R_OK | constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

/** Boots the kernel with no root disk under KVM; it panics at once and QEMU exits (-no-reboot). */
function probeKvm(kernel: string): Promise<number | null> {
  return new Promise((resolve) => {
    const started = Date.now();
    const child = spawn(
      'qemu-system-x86_64',
      ['-M', 'microvm', '-accel', 'kvm', '-cpu', 'host,-arch-capabilities', '-m', '128M', '-nodefaults', '-no-user-config', '-nographic', '-no-reboot', '-kernel', kernel, '-append', 'console=ttyS0 panic=-1 quiet', '-serial', 'null'],
      { stdio: 'ignore' },
    );
    const timer = setTimeout(() => child.kill('SIGKILL'), KVM_PROBE_LIMIT_MS);
    child.on('error', () => resolve(null));
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve(code === 0 ? Date.now() - started : null);
    });
  });
}

export async function chooseAccel(opts: { override: 'kvm' | 'tcg' | 'auto'; kernel: string; cacheFile: string; cacheKey: string }): Promise<AccelChoice> {
  if (opts.override !== 'auto') return { accel: opts.override, reason: 'set by VESSEL_ACCEL' };
  if (!kvmUsable()) return { accel: 'tcg', reason: '/dev/kvm is not usable' };
  if (existsSync(opts.cacheFile)) {
    const cached = JSON.parse(readFileSync(opts.cacheFile, 'utf8')) as AccelChoice & { key: string };
    if (cached.key === opts.cacheKey) return { accel: cached.accel, reason: `${cached.reason} (cached)` };
  }
  const ms = await probeKvm(opts.kernel);
  const choice: AccelChoice =
    ms === null
      ? { accel: 'tcg', reason: `KVM probe boot did not finish within ${KVM_PROBE_LIMIT_MS} ms: /dev/kvm is slower than TCG here` }
      : { accel: 'kvm', reason: `KVM probe boot took ${ms} ms` };
  writeFileSync(opts.cacheFile, JSON.stringify({ ...choice, key: opts.cacheKey }));
  return choice;
}

/**
 * The host TSC rate in kHz. Under TCG the guest reads the host's TSC, and its boot-time TSC
 * calibration against an emulated PIT is unreliable: now and then the kernel stalls there before
 * printing a line. Telling it the rate (tsc_early_khz) skips that calibration.
 */
export function hostTscKhz(): number | null {
  try {
    const m = /^cpu MHz\s*:\s*([\d.]+)/m.exec(readFileSync('/proc/cpuinfo', 'utf8'));
    return m === null ? null : Math.round(Number(m[1]) * 1000);
  } catch {
    return null;
  }
}
