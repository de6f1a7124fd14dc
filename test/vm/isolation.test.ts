/**
 * What a compromised QEMU could reach: nothing of the host but its own descriptors. It runs under
 * a uid of its runtime's own, chrooted into an empty directory, in a network namespace of its own
 * and in a cgroup with its limits; the runtime's directory and every file root reads or writes are
 * root's, so that uid can plant nothing there; its console log is capped.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, lstatSync, readFileSync, readdirSync, readlinkSync, statSync } from 'node:fs';
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
  assert.match(cgroups, new RegExp(`/vessel/${a}$`, 'm'));
  const v1 = `/sys/fs/cgroup/memory/vessel/${a}/memory.limit_in_bytes`;
  const limit = Number(readFileSync(existsSync(v1) ? v1 : `/sys/fs/cgroup/vessel/${a}/memory.max`, 'utf8'));
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
