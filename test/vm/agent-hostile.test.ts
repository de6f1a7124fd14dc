/**
 * A hostile guest on its own agent channel. The agent holds the virtio-serial port open (the
 * kernel lets one process open it at a time), so a guest process takes a copy of the agent's
 * descriptor with pidfd_getfd, as root in the guest can, and writes garbage into the channel
 * behind the agent's back. The service must carry on: that VM's connection ends and is
 * resynchronized on the next request, the other VM never notices, and the API answers throughout.
 * Then the worst such a guest could do to the host's side of the channel, a crash of the agent's
 * process (kill -9), while both runtimes serve a streaming exec and an upload.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Service } from '../support/service.js';
import { assertUnprivilegedPart } from '../support/part-process.js';
import { sseEvents, type Sse } from '../support/sse.js';

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
  const agentProcess = svc.partPid('agent');
  assert.ok(agentProcess !== null, 'the agent connections run in a process of their own');
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
  assert.equal(svc.partPid('agent'), agentProcess, 'garbage costs a connection, not even the agent process');
});

const auth = () => ({ authorization: `Bearer ${svc.token}` });

test('the agent connections are a process of their own, as vessel-agent with no capabilities; kill -9 of it costs the requests in flight, never a runtime, a guest process or the API', TIMEOUT, async () => {
  const first = svc.partPid('agent');
  assert.ok(first !== null, 'the agent process runs as a child of the service');
  await assertUnprivilegedPart(first, 'vessel-agent');

  // A process the guest keeps, started before the kill.
  const kept = await svc.call('POST', '/v1/runtimes/bystander/processes', { command: 'sleep 1000' });
  assert.equal(kept.status, 201, JSON.stringify(kept.body));
  // A streaming exec that prints until told to stop, read up to its first line.
  const streamed = await fetch(`${svc.url}/v1/runtimes/hostile/exec`, {
    method: 'POST',
    headers: { ...auth(), 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ command: 'while [ ! -e /tmp/stop ]; do echo tick; sleep 0.1; done', background: true }),
  });
  const events = sseEvents(streamed);
  const start = (await events.next()).value as Sse;
  assert.equal(start.event, 'start');
  for (let e = await events.next(); !e.done && e.value.event !== 'stdout'; e = await events.next());
  // An upload whose first bytes are in and whose rest waits.
  let rest: () => void = () => undefined;
  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      controller.enqueue(Buffer.alloc(64 * 1024, 0x61));
      await new Promise<void>((resolve) => (rest = resolve));
      controller.enqueue(Buffer.alloc(64 * 1024, 0x61));
      controller.close();
    },
  });
  const upload = fetch(`${svc.url}/v1/runtimes/bystander/files?path=/root/upload.bin`, {
    method: 'PUT',
    headers: { ...auth(), 'content-type': 'application/octet-stream' },
    body,
    duplex: 'half',
  } as RequestInit);
  // The upload's first bytes reached the guest: the file exists (by another runtime's request, through the same process).
  for (let i = 0; i < 100 && (await exec('bystander', 'test -e /root/upload.bin')).body.data?.exit_code !== 0; i++) await new Promise((r) => setTimeout(r, 50));

  process.kill(first, 'SIGKILL');
  // The API never depended on the agent's process: it answers while that one is started again.
  const during = await svc.call('GET', '/v1/runtimes/bystander');
  assert.equal(during.status, 200);
  assert.equal(during.body.data.status, 'running');
  // What was in flight fails as unavailable: the stream with an error event, the upload with 503.
  let last: Sse | undefined;
  for (let e = await events.next(); !e.done; e = await events.next()) last = e.value;
  assert.equal(last?.event, 'error', JSON.stringify(last));
  assert.equal(last?.data.error.code, 'unavailable');
  rest();
  const uploaded = await upload;
  assert.equal(uploaded.status, 503, await uploaded.clone().text());
  assert.equal(((await uploaded.json()) as { error: { code: string } }).error.code, 'unavailable');

  const next = await svc.partStartedAgain('agent', first);
  assert.ok(next !== null && next !== first, 'a new agent process was started');
  // Requests after the restart work, over connections handed to the new process.
  assert.equal((await exec('hostile', 'echo after')).body.data.stdout, 'after\n');
  const put = await fetch(`${svc.url}/v1/runtimes/bystander/files?path=/root/upload.bin`, { method: 'PUT', headers: { ...auth(), 'content-type': 'application/octet-stream' }, body: 'whole' });
  assert.equal(put.status, 200);
  assert.equal((await exec('bystander', 'cat /root/upload.bin')).body.data.stdout, 'whole');
  // Nothing the guests ran was lost: the kept process and the streamed one run on, and the latter's output is still there.
  const processes = await svc.call('GET', '/v1/runtimes/bystander/processes');
  assert.ok(processes.body.data.some((p: { id: number; status: string }) => p.id === kept.body.data.id && p.status === 'running'), JSON.stringify(processes.body));
  const tick = await svc.call('GET', `/v1/runtimes/hostile/processes/${start.data.id}`);
  assert.equal(tick.body.data.status, 'running', 'the streamed exec (background) outlives its cut stream');
  await exec('hostile', 'touch /tmp/stop');
  for (const name of ['hostile', 'bystander']) assert.equal((await svc.call('GET', `/v1/runtimes/${name}`)).body.data.status, 'running');
  assert.equal(svc.partPid('agent'), next, 'and the agent process stays up');
});
