/**
 * An OCI image with no shell, no init and no tini (as a distroless image) made into a root disk
 * by src/templates, then booted with the default image's own kernel and initrd: the initramfs
 * hands over to /usr/bin/tini and /sbin/vessel-init as it does for the default image, which the
 * guest kit put there (through the image's merged-/usr links), and vessel-agent answers.
 *
 * QEMU runs directly, not through the driver: this proves the disk, not the driver's use of it
 * (which is the next step, docs/templates.md). Run under the VM lock:
 *   flock /tmp/vessel-vm.lock node --test dist/test/vm/templates-boot.test.js
 */
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { BlobStore } from '../../src/templates/blob-store.js';
import { writeExt4 } from '../../src/templates/ext4-image.js';
import { addGuestKit } from '../../src/templates/guest-kit.js';
import { imageTree } from '../../src/templates/image-rootfs.js';
import { readLayout } from '../../src/templates/oci-image.js';
import { hostTscKhz } from '../../src/vm/accel.js';
import { AgentClient } from '../../src/vm/agent/agent-client.js';
import { findImage, GUEST_RECIPE_DIR } from '../../src/vm/guest-image.js';
import { buildAgent, eventually } from '../support/agent-harness.js';
import { writeOciLayout } from '../support/oci-layout.js';
import { SHARED_IMAGE_DIR } from '../support/service.js';
import { tarOf } from '../support/tar-stream.js';

const dir = mkdtempSync(join(tmpdir(), 'vessel-template-boot-'));
after(() => rmSync(dir, { recursive: true, force: true }));

test('a distroless-like image boots on the default kernel and initrd, and its agent runs commands', async () => {
  const image = findImage(SHARED_IMAGE_DIR);
  assert.ok(image !== null, `no guest image in ${SHARED_IMAGE_DIR}: build it with vessel image build`);
  const agent = buildAgent();
  if ('skip' in agent) throw new Error(agent.skip);

  const layout = join(dir, 'layout');
  writeOciLayout(layout, {
    layers: [tarOf([
      { path: 'usr/bin/', type: 'Directory' },
      { path: 'usr/sbin/', type: 'Directory' },
      { path: 'bin', type: 'SymbolicLink', linkpath: 'usr/bin' },
      { path: 'sbin', type: 'SymbolicLink', linkpath: 'usr/sbin' },
      { path: 'etc/os-release', body: 'ID=distroless-test\n' },
      { path: 'app/hello.txt', body: 'hello from the image\n', uid: 1000, gid: 1000 },
    ], { gzip: true })],
    config: { Cmd: ['/app/server'] },
  });
  const blobs = new BlobStore(join(dir, 'blobs'));
  const { tree } = await imageTree(layout, readLayout(layout), blobs);
  await addGuestKit(tree, blobs, {
    busybox: existsSync('/usr/bin/busybox') ? '/usr/bin/busybox' : '/bin/busybox',
    tini: '/usr/bin/tini-static',
    agent: agent.binary,
    vesselInit: readFileSync(join(GUEST_RECIPE_DIR, 'vessel-init'), 'utf8'),
  });
  const disk = join(dir, 'rootfs.ext4');
  await writeExt4(tree, blobs, disk, { sizeBytes: 256 * 1024 * 1024 });

  const socket = join(dir, 'agent.sock');
  const serial = join(dir, 'serial.log');
  const tsc = hostTscKhz();
  const qemu = spawn('qemu-system-x86_64', [
    '-M', 'microvm,isa-serial=on,rtc=on,pit=off', '-accel', 'tcg', '-cpu', 'max', '-m', '256M', '-smp', '1',
    '-nodefaults', '-no-user-config', '-nographic', '-no-reboot',
    '-kernel', image!.kernel, '-initrd', image!.initrd,
    '-append', `console=ttyS0 root=/dev/vda rw loglevel=6 panic=-1 ipv6.disable=1 tsc=reliable nowatchdog${tsc === null ? '' : ` tsc_early_khz=${tsc}`}`,
    '-drive', `file=${disk},format=raw,if=none,id=d0`, '-device', 'virtio-blk-device,drive=d0',
    '-device', 'virtio-serial-device',
    '-chardev', `socket,id=vagent,path=${socket},server=on,wait=off`, '-device', 'virtserialport,chardev=vagent,name=org.vessel.agent.0',
    '-device', 'virtio-rng-device',
    '-serial', `file:${serial}`,
  ], { stdio: 'ignore' });
  let client: AgentClient | null = null;
  try {
    // A boot under TCG on a loaded host takes tens of seconds; the agent's HELLO is the readiness.
    client = await eventually(async () => (existsSync(socket) ? AgentClient.connect(socket, { timeoutMs: 2000 }).catch(() => undefined) : undefined), 180_000, 'the agent to answer');
    await client.ping();
    const { stream } = await client.readFile('/app/hello.txt');
    const chunks: Buffer[] = [];
    for await (const c of stream) chunks.push(c as Buffer);
    assert.equal(Buffer.concat(chunks).toString(), 'hello from the image\n');

    const run = async (argv: string[]) => {
      const p = client!.spawn({ argv, env: ['PATH=/usr/bin:/bin'], cwd: '/', hold: true });
      let out = '';
      for await (const chunk of p) out += chunk.data.toString();
      const done = await p.done;
      return { out, code: done?.code };
    };
    assert.deepEqual(await run(['/.vessel/bin/busybox', 'cat', '/etc/os-release']), { out: 'ID=distroless-test\n', code: 0 });
    const pid1 = await run(['/.vessel/bin/busybox', 'cat', '/proc/1/cmdline']);
    assert.match(pid1.out, /tini/, 'tini is PID 1');
    const hosts = await run(['/.vessel/bin/busybox', 'cat', '/etc/hosts']);
    assert.match(hosts.out, /127\.0\.0\.1 localhost/, 'vessel-init wrote /run/vessel/hosts, which /etc/hosts links to');
    assert.match(readFileSync(serial, 'utf8'), /vessel-init: ready, agent on \/dev\/vport/);
  } finally {
    client?.close();
    qemu.kill('SIGKILL');
  }
});
