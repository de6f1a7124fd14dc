/**
 * A hostile guest on its own agent channel. The agent holds the virtio-serial port open (the
 * kernel lets one process open it at a time), so a guest process takes a copy of the agent's
 * descriptor with pidfd_getfd, as root in the guest can, and writes garbage into the channel
 * behind the agent's back. The service must carry on: that VM's connection ends and is
 * resynchronized on the next request, the other VM never notices, and the API answers throughout.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service } from '../support/service.js';

const TIMEOUT = { timeout: 300_000 };
const svc = new Service({ VESSEL_WARM_POOL: '0' });
before(() => svc.start(), { timeout: 900_000 });
after(() => svc.destroy());

const exec = (rt: string, command: string) => svc.call('POST', `/v1/runtimes/${rt}/exec`, { command, timeout_secs: 30 });

/**
 * Finds the agent's descriptor on the port, copies it, waits for the exec that started it to
 * return, then writes 4 MiB of random bytes and frames with impossible lengths, for at most 3 s.
 */
const JUNK_WRITER = String.raw`
import ctypes, os, sys, time
pid = int(sys.argv[1])
fd = next(int(f) for f in os.listdir(f'/proc/{pid}/fd') if os.readlink(f'/proc/{pid}/fd/{f}').startswith('/dev/vport'))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
port = libc.syscall(438, os.pidfd_open(pid), fd, 0)  # pidfd_getfd
if port < 0:
    print('pidfd_getfd failed', ctypes.get_errno(), flush=True)
    sys.exit(1)
time.sleep(1)
huge = bytes([0x56, 0x8e, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f])
wrote, deadline = 0, time.time() + 3
while wrote < 4 << 20 and time.time() < deadline:
    chunk = os.urandom(65536) + huge
    try:
        wrote += os.write(port, chunk)
    except (BlockingIOError, OSError):
        time.sleep(0.005)
print('wrote', wrote, flush=True)
`;

test('garbage a guest process writes into the agent channel ends only that connection; the VM, the others and the API go on', TIMEOUT, async () => {
  for (const name of ['hostile', 'bystander']) {
    const r = await svc.call('POST', '/v1/runtimes', { display_name: name });
    assert.equal(r.status, 201, JSON.stringify(r.body));
  }
  const put = await fetch(`${svc.url}/v1/runtimes/hostile/files?path=/root/junk.py`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/octet-stream' },
    body: JUNK_WRITER,
  });
  assert.equal(put.status, 200);
  // Port name, as vessel-init finds it.
  const port = await exec('hostile', 'for p in /sys/class/virtio-ports/*; do [ "$(cat $p/name)" = org.vessel.agent.0 ] && echo /dev/${p##*/}; done');
  assert.match(port.body.data.stdout, /^\/dev\/vport\d+p\d+\n$/);
  const started = await exec('hostile', 'setsid -f python3 /root/junk.py $(pidof vessel-agent) </dev/null >/root/junk.out 2>&1; echo started');
  assert.equal(started.body.data?.stdout, 'started\n', JSON.stringify(started.body));

  // While the garbage flows and after: the bystander and the API never fail; the hostile VM's
  // requests may fail while its channel is broken (503), and must work again after.
  const hostile: number[] = [];
  const deadline = Date.now() + 20_000;
  let recovered = false;
  while (Date.now() < deadline) {
    const [h, b, health] = await Promise.all([exec('hostile', 'echo ok'), exec('bystander', 'echo ok'), fetch(`${svc.url}/healthz`)]);
    assert.equal(b.status, 200, `bystander: ${JSON.stringify(b.body)}`);
    assert.equal(b.body.data.stdout, 'ok\n');
    assert.ok(health.ok, 'the API answers');
    hostile.push(h.status);
    if (h.status !== 200) assert.equal(h.body.error.code, 'unavailable', JSON.stringify(h.body));
    else assert.equal(h.body.data.stdout, 'ok\n');
    const done = await exec('hostile', 'cat /root/junk.out 2>/dev/null');
    if (done.status === 200 && /^wrote \d+/.test(done.body.data.stdout)) {
      recovered = true;
      break;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  assert.ok(recovered, `the writer finished and the hostile VM answered after it (statuses ${hostile.join(',')})`);
  const wrote = await exec('hostile', 'cat /root/junk.out');
  assert.match(wrote.body.data.stdout, /^wrote [1-9]\d*\n$/, 'the garbage did reach the channel');
  assert.match(svc.log, /the guest broke its agent channel/, 'the service saw the garbage and ended that connection');
  // The VM is unharmed: a file round trip and a fork identity request (a pause/resume) still work.
  assert.equal((await svc.call('POST', '/v1/runtimes/hostile/pause')).status, 200);
  assert.equal((await svc.call('POST', '/v1/runtimes/hostile/resume')).status, 200);
  const read = await fetch(`${svc.url}/v1/runtimes/hostile/files?path=/root/junk.py`, { headers: { authorization: `Bearer ${svc.token}` } });
  assert.equal(await read.text(), JUNK_WRITER);
  for (const name of ['hostile', 'bystander']) assert.equal((await svc.call('GET', `/v1/runtimes/${name}`)).body.data.status, 'running');
});
