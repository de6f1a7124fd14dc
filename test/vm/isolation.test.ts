/**
 * What a compromised QEMU could reach: nothing of the host but its own descriptors. It runs under
 * a uid of its runtime's own, chrooted into an empty directory, in a network namespace of its own
 * and in a cgroup with its limits; the runtime's directory and every file root reads or writes are
 * root's, so that uid can plant nothing there; its console log is capped.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, existsSync, lstatSync, openSync, readFileSync, readSync, readdirSync, readlinkSync, statSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { Service } from '../support/service.js';

const TIMEOUT = { timeout: 300_000 };
const svc = new Service({ VESSEL_WARM_POOL: '0' });
before(() => svc.start(), { timeout: 900_000 });
after(() => svc.destroy());

const UID_BASE = 200_000;

async function create(name: string): Promise<string> {
  const r = await svc.call('POST', '/v1/runtimes', { display_name: name });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.data.id;
}

const runtimeDir = (id: string) => join(svc.dataDir, 'runtimes', id);
const qemuPid = (id: string) => Number(readFileSync(join(runtimeDir(id), 'qemu.pid'), 'utf8'));
const uidOf = (pid: number) => Number(/^Uid:\s+(\d+)/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]);

/** Every file and directory under `dir`, depth first. */
function walk(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    out.push(path);
    if (lstatSync(path).isDirectory()) out.push(...walk(path));
  }
  return out;
}

test('QEMU runs under a uid of its runtime, chrooted into an empty directory, in its own network namespace and cgroup', TIMEOUT, async () => {
  const a = await create('iso-a');
  const b = await create('iso-b');
  const [pa, pb] = [qemuPid(a), qemuPid(b)];
  assert.ok(uidOf(pa) >= UID_BASE && uidOf(pb) >= UID_BASE, 'not root');
  assert.notEqual(uidOf(pa), uidOf(pb), 'a uid of each runtime');
  const jail = join(svc.dataDir, 'qemu-root');
  assert.equal(readlinkSync(`/proc/${pa}/root`), jail, 'chrooted');
  assert.deepEqual(readdirSync(jail), [], 'into an empty directory');
  assert.equal(statSync(jail).uid, 0);
  const hostNet = readlinkSync('/proc/self/ns/net');
  assert.notEqual(readlinkSync(`/proc/${pa}/ns/net`), hostNet, 'not in the host network namespace');
  assert.notEqual(readlinkSync(`/proc/${pa}/ns/net`), readlinkSync(`/proc/${pb}/ns/net`));
  // Its cgroup (v1 here, v2 on a stock host) holds its memory limit: the guest's and QEMU's own.
  const cgroups = readFileSync(`/proc/${pa}/cgroup`, 'utf8');
  const group = new RegExp(`/vessel/([0-9a-f]{8})/${a}$`, 'm').exec(cgroups);
  assert.ok(group !== null, `under the service's own group: ${cgroups}`);
  const v1 = `/sys/fs/cgroup/memory/vessel/${group[1]}/${a}/memory.limit_in_bytes`;
  const limit = Number(readFileSync(existsSync(v1) ? v1 : `/sys/fs/cgroup/vessel/${group[1]}/${a}/memory.max`, 'utf8'));
  assert.equal(limit, (512 + 256) * 1024 * 1024);
  // A restart of the VM keeps its uid: the uid belongs to the runtime while its directory exists.
  const uid = uidOf(pa);
  assert.equal((await svc.call('POST', '/v1/runtimes/iso-a/stop')).status, 200);
  assert.equal((await svc.call('POST', '/v1/runtimes/iso-a/start')).status, 200);
  assert.equal(uidOf(qemuPid(a)), uid);
});

test("nothing under the data directory belongs to a VM's uid, and that uid can make nothing in its runtime's directory", TIMEOUT, async () => {
  const id = (await svc.call('GET', '/v1/runtimes/iso-a')).body.data.id;
  const pid = qemuPid(id);
  for (const path of walk(svc.dataDir)) {
    const st = lstatSync(path);
    assert.ok(st.uid < UID_BASE, `${path} belongs to uid ${st.uid}`);
  }
  const dir = runtimeDir(id);
  assert.equal(statSync(dir).mode & 0o777, 0o700);
  // As the VM's uid: no file, no symlink in its directory, and its state file cannot be read.
  const asVm = (cmd: string[]) => execFileSync('setpriv', [`--reuid=${uidOf(pid)}`, `--regid=${uidOf(pid)}`, '--clear-groups', ...cmd], { stdio: 'pipe' });
  assert.throws(() => asVm(['ln', '-s', '/etc/shadow', join(dir, 'suspended.state')]), /Permission denied/);
  assert.throws(() => asVm(['touch', join(dir, 'planted')]), /Permission denied/);
  assert.throws(() => asVm(['cat', join(dir, 'vm.json')]), /Permission denied/);
  assert.throws(() => asVm(['cat', join(svc.dataDir, 'master.key')]), /Permission denied/);
});

test('a guest that floods its serial console has its log cut at the cap', TIMEOUT, async () => {
  const id = (await svc.call('GET', '/v1/runtimes/iso-b')).body.data.id;
  const r = await svc.call('POST', '/v1/runtimes/iso-b/exec', { command: 'head -c 3000000 /dev/zero | tr "\\0" x > /dev/ttyS0', timeout_secs: 120 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  const log = join(runtimeDir(id), 'serial.log');
  let size = Infinity;
  for (let i = 0; i < 60 && size > 1024 * 1024; i++) {
    await new Promise((res) => setTimeout(res, 500));
    size = statSync(log).size;
  }
  assert.ok(size <= 1024 * 1024, `serial.log is ${size} bytes`);
  assert.ok(existsSync(`${log}.1`), 'its recent end is kept beside it');
  assert.ok(statSync(`${log}.1`).size <= 256 * 1024);
  assert.equal((await svc.call('POST', '/v1/runtimes/iso-b/exec', { command: 'echo fine' })).body.data.stdout, 'fine\n');
});

/** The runtime's top overlay, as its state file names it. */
const overlayOf = (id: string) => join(runtimeDir(id), `disk-${JSON.parse(readFileSync(join(runtimeDir(id), 'vm.json'), 'utf8')).disk}.qcow2`);

test("a qcow2 header rewritten by the VM's QEMU chooses no file: its backing name is ignored, an external data file is refused", TIMEOUT, async () => {
  const id = await create('iso-hdr');
  assert.equal((await svc.call('POST', '/v1/runtimes/iso-hdr/exec', { command: 'echo mine > /root/mine && sync' })).body.data.exit_code, 0);
  assert.equal((await svc.call('POST', '/v1/runtimes/iso-hdr/stop')).status, 200);

  // What an escaped QEMU could write into its own overlay: a backing file of its choosing.
  const decoy = join(svc.dataDir, 'decoy.raw');
  execFileSync('truncate', ['-s', '64M', decoy]);
  execFileSync('qemu-img', ['rebase', '-u', '-b', decoy, '-F', 'raw', overlayOf(id)]);
  const started = await svc.call('POST', '/v1/runtimes/iso-hdr/start');
  assert.equal(started.status, 200, JSON.stringify(started.body));
  const pid = qemuPid(id);
  const open = readdirSync(`/proc/${pid}/fd`).map((fd) => { try { return readlinkSync(`/proc/${pid}/fd/${fd}`); } catch { return ''; } });
  assert.ok(!open.includes(decoy), 'QEMU never opened the file the header names');
  const r = await svc.call('POST', '/v1/runtimes/iso-hdr/exec', { command: 'cat /root/mine && test -x /bin/sh && echo rootfs' });
  assert.equal(r.body.data.stdout, 'mine\nrootfs\n', 'the guest still sees its own disk on its own root filesystem');
  assert.equal((await svc.call('POST', '/v1/runtimes/iso-hdr/stop')).status, 200);

  // The external data file feature (incompatible bit 2): QEMU would open that file read-write.
  const fd = openSync(overlayOf(id), 'r+');
  const bits = Buffer.alloc(1);
  readSync(fd, bits, 0, 1, 79);
  writeSync(fd, Buffer.from([bits[0]! | 0b100]), 0, 1, 79);
  closeSync(fd);
  const refused = await svc.call('POST', '/v1/runtimes/iso-hdr/start');
  assert.equal(refused.status, 503, JSON.stringify(refused.body));
  assert.match(refused.body.error.message, /external data file/);
  assert.equal((await svc.call('DELETE', '/v1/runtimes/iso-hdr')).status, 200);
});
