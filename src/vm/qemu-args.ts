/** The QEMU command line for one runtime. Pure, so that it can be unit tested. */
import type { Accel } from './accel.js';

export interface LaunchPlan {
  accel: Accel;
  kernel: string;
  initrd: string;
  disk: string;
  qmpSocket: string;
  agentSocket: string;
  serialLog: string;
  memoryMib: number;
  vcpus: number;
  hostname: string;
  /** uid:gid QEMU drops to once its devices are open; one per VM so VMs cannot touch each other. */
  runAs: string;
  /** Host TSC rate for the guest kernel under TCG (see hostTscKhz). */
  tscKhz: number | null;
}

export function qemuArgs(p: LaunchPlan): string[] {
  const tsc = p.accel === 'tcg' && p.tscKhz !== null ? ` tsc_early_khz=${p.tscKhz}` : '';
  const accel = p.accel === 'kvm' ? ['-accel', 'kvm', '-cpu', 'host,-arch-capabilities'] : ['-accel', `tcg,thread=${p.vcpus > 1 ? 'multi' : 'single'}`, '-cpu', 'max'];
  return [
    '-name', `vessel-${p.hostname},debug-threads=on`,
    '-M', 'microvm,isa-serial=on,rtc=on',
    ...accel,
    '-m', `${p.memoryMib}M`,
    '-smp', String(p.vcpus),
    '-nodefaults', '-no-user-config', '-nographic', '-no-reboot',
    '-kernel', p.kernel,
    '-initrd', p.initrd,
    '-append', `console=ttyS0 root=/dev/vda rw quiet panic=-1 vessel.hostname=${p.hostname}${tsc}`,
    '-drive', `id=root,file=${p.disk},format=qcow2,if=none,discard=unmap`,
    '-device', 'virtio-blk-device,drive=root',
    '-device', 'virtio-serial-device',
    '-chardev', `socket,id=agent,path=${p.agentSocket},server=on,wait=off`,
    '-device', 'virtserialport,chardev=agent,name=org.qemu.guest_agent.0',
    '-device', 'virtio-balloon-device,id=balloon',
    '-device', 'virtio-rng-device',
    '-qmp', `unix:${p.qmpSocket},server=on,wait=off`,
    '-serial', `file:${p.serialLog}`,
    // elevateprivileges=deny would also forbid the setuid of -runas, which runs after the filter
    // is installed; once QEMU runs as an unprivileged uid it cannot regain root anyway.
    '-sandbox', 'on,obsolete=deny,spawn=deny,resourcecontrol=deny',
    '-runas', p.runAs,
  ];
}
