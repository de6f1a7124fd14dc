/** The QEMU command line for one runtime. Pure, so that it can be unit tested. */
import { GUEST_NETWORK } from '../core/ports.js';
import type { Accel } from './accel.js';

export interface LaunchPlan {
  accel: Accel;
  kernel: string;
  initrd: string;
  /**
   * The top qcow2 overlay: the block node name it gets (checkpoints add nodes on top) and the fd
   * set that holds its descriptors, one read-write and one read-only (QEMU reopens it read-only
   * when a checkpoint puts a new overlay over it).
   */
  disk: { node: string; fdset: number };
  /**
   * What the overlay stands on, bottom (the raw root filesystem) first, each layer a read-only
   * descriptor in a fd set of its own. Every backing node is named here, so QEMU never opens a
   * backing file by the name a (guest-writable) qcow2 header holds.
   */
  backing: BackingNode[];
  /**
   * Guest RAM. A file shared with the VM (its own RAM file, copied at checkpoint time), a
   * checkpoint's RAM file mapped privately and read-only (forks share its clean pages through
   * the page cache), or anonymous memory when there is no file.
   */
  memory: { file: string; shared: boolean } | null;
  /** Descriptors QEMU inherits and the fd set each joins (`-add-fd`); the numbers are QEMU's own. */
  fdsets: Array<{ fd: number; set: number }>;
  /** Wait for a migration stream (`migrate-incoming`) instead of booting; the stream is in INCOMING_FDSET. */
  incoming: boolean;
  qmpSocket: string;
  agentSocket: string;
  serialLog: string;
  memoryMib: number;
  vcpus: number;
  name: string;
  /** uid:gid QEMU drops to once its devices are open; one per runtime so VMs cannot touch each other. */
  runAs: string;
  /** An empty directory QEMU is chrooted into once its devices are open: no host path is left to it. */
  chroot: string;
  /** Host TSC rate for the guest kernel under TCG (see hostTscKhz). */
  tscKhz: number | null;
  /** The descriptor of the NIC's TAP, or null for a NIC on an empty hub (templates, which never talk). */
  tapFd: number | null;
}

export interface BackingNode {
  node: string;
  fdset: number;
  format: 'raw' | 'qcow2';
}

/** `-blockdev` options of the backing chain, bottom first; each qcow2 node names the one below it. */
function backingChain(chain: BackingNode[]): string[] {
  return chain.flatMap((b, i) => {
    const below = i === 0 ? (b.format === 'qcow2' ? ',backing=null' : '') : `,backing=${chain[i - 1]!.node}`;
    return [
      '-blockdev', `driver=file,filename=/dev/fdset/${b.fdset},node-name=${b.node}-file,read-only=on`,
      '-blockdev', `driver=${b.format},file=${b.node}-file,node-name=${b.node},read-only=on${below}`,
    ];
  });
}

/**
 * The machine and the kernel command line every template boots with. A fork inherits its
 * template's booted kernel and device state, so changing either must make new templates: the
 * driver folds BOOT_PROFILE into its image id.
 *
 * Idle cost is what limits density under TCG, where every guest or QEMU timer wakes the host:
 * - pit=off: the guest runs on its local APIC timer, but an i8254 left in its boot mode fires a
 *   QEMU timer 36 times a second for nothing (about 0.45% -> 0.25% of a core per idle fork);
 * - nowatchdog, tsc=reliable: no lockup-detector hrtimer and no clocksource watchdog, which has
 *   nothing to compare the TSC with here anyway;
 * - compaction_proactiveness=0: kcompactd otherwise wakes twice a second to consider compacting
 *   memory that an idle sandbox does not fragment.
 */
export const BOOT_PROFILE = {
  machine: 'microvm,isa-serial=on,rtc=on,pit=off,memory-backend=mem',
  // A guest short of memory takes pages back from its balloon rather than kill processes: a
  // memory request is a target, not a limit.
  balloon: 'virtio-balloon-device,id=balloon,deflate-on-oom=on',
  // loglevel=6 rather than quiet: the serial console is the runtime's console log (GET
  // …/console-log), which should show a boot's kernel banner, notices, warnings and errors; the
  // informational rest stays in dmesg, and the few KiB more of a cold boot cost milliseconds.
  cmdline: 'console=ttyS0 root=/dev/vda rw loglevel=6 panic=-1 ipv6.disable=1 tsc=reliable nowatchdog sysctl.vm.compaction_proactiveness=0',
  // vessel-agent's virtio-serial port: vessel-init finds it by this name. The ports are device
  // state a fork inherits, so they are part of the profile.
  agentPort: 'org.vessel.agent.0',
};

export function qemuArgs(p: LaunchPlan): string[] {
  const tsc = p.accel === 'tcg' && p.tscKhz !== null ? ` tsc_early_khz=${p.tscKhz}` : '';
  const accel =
    p.accel === 'kvm'
      ? ['-accel', 'kvm', '-cpu', 'host,-arch-capabilities']
      : ['-accel', `tcg,thread=${p.vcpus > 1 ? 'multi' : 'single'},tb-size=64`, '-cpu', 'max'];
  const memory =
    p.memory === null
      ? ['-object', `memory-backend-ram,id=mem,size=${p.memoryMib}M`]
      : p.memory.shared
        ? ['-object', `memory-backend-file,id=mem,size=${p.memoryMib}M,mem-path=${p.memory.file},share=on`]
        : ['-object', `memory-backend-file,id=mem,size=${p.memoryMib}M,mem-path=${p.memory.file},share=off,readonly=on,rom=off`];
  // The guest's address is the same in every VM; it is set at boot from the kernel command line.
  const g = GUEST_NETWORK;
  const netdev = p.tapFd === null ? 'hubport,id=net0,hubid=0' : `tap,id=net0,fd=${p.tapFd}`;
  return [
    '-name', `vessel-${p.name},debug-threads=on`,
    '-M', BOOT_PROFILE.machine,
    ...accel,
    '-m', `${p.memoryMib}M`,
    ...memory,
    '-smp', String(p.vcpus),
    '-nodefaults', '-no-user-config', '-nographic', '-no-reboot',
    '-kernel', p.kernel,
    '-initrd', p.initrd,
    // Nothing per-VM on the kernel command line: forks share their template's boot. The
    // hostname and the rest of a VM's identity are set through the guest agent.
    '-append', `${BOOT_PROFILE.cmdline} vessel.net=${g.address}/${g.prefixLength},${g.gateway}${tsc}`,
    ...p.fdsets.flatMap(({ fd, set }) => ['-add-fd', `fd=${fd},set=${set}`]),
    // Writeback through the host's page cache, with every guest flush passed on as an fdatasync
    // of the overlay (cache.no-flush=off): what the guest has synced survives a crash of QEMU or
    // of the host. These are QEMU's defaults, spelled out because durability depends on them.
    '-blockdev', `driver=file,filename=/dev/fdset/${p.disk.fdset},node-name=${p.disk.node}-file,discard=unmap,cache.direct=off,cache.no-flush=off`,
    ...backingChain(p.backing),
    '-blockdev', `driver=qcow2,file=${p.disk.node}-file,node-name=${p.disk.node},discard=unmap,backing=${p.backing.at(-1)?.node ?? 'null'}`,
    '-device', `virtio-blk-device,drive=${p.disk.node}`,
    '-device', 'virtio-serial-device',
    // The agent's channel (docs/agent-protocol.md): the service connects to this socket.
    '-chardev', `socket,id=vagent,path=${p.agentSocket},server=on,wait=off`,
    '-device', `virtserialport,chardev=vagent,name=${BOOT_PROFILE.agentPort}`,
    '-device', BOOT_PROFILE.balloon,
    '-device', 'virtio-rng-device',
    '-netdev', netdev,
    '-device', `virtio-net-device,netdev=net0,mac=${g.mac}`,
    '-qmp', `unix:${p.qmpSocket},server=on,wait=off`,
    // Appended to, so that the service can cut it in place when it grows (log-rotation.ts).
    '-chardev', `file,id=serial0,path=${p.serialLog},append=on`,
    '-serial', 'chardev:serial0',
    ...(p.incoming ? ['-incoming', 'defer'] : []),
    // elevateprivileges=deny would also forbid the switch to the uid below, which comes after the
    // filter is installed; once QEMU runs as an unprivileged uid it cannot regain root anyway.
    '-sandbox', 'on,obsolete=deny,spawn=deny,resourcecontrol=deny',
    '-run-with', `chroot=${p.chroot},user=${p.runAs}`,
  ];
}
