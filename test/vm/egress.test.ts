/**
 * The network gateway with real VMs: curl and python inside guests against upstream servers on
 * the host's loopback, through the TAP, nftables, the DNS responder and the egress proxy.
 */
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import { createSocket } from 'node:dgram';
import { connect } from 'node:net';
import { readFileSync } from 'node:fs';
import { request as httpRequest } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { runCommand } from '../../src/platform/run-command.js';
import { assertUnprivilegedPart } from '../support/part-process.js';
import { REPO_ROOT, Service } from '../support/service.js';
import { Upstreams } from '../support/upstream.js';

const up = new Upstreams();
let svc: Service;
const SECRET = `sk-live-${randomBytes(12).toString('hex')}`;
let HTTP = 0;
let HTTPS = 0;
let TCP = 0;
let RECORDED = 0;

const LOOPBACK_NAMES = ['api.test', 'other.test', 'wild.test', 'deep.a.wild.test', 'raw.test', 'rebind.test', 'open.test'];

before(async () => {
  await up.start();
  HTTP = up.port(up.http);
  HTTPS = up.port(up.https);
  TCP = up.port(up.tcp);
  RECORDED = up.port(up.recorded);
  up.setNames({ ...Object.fromEntries(LOOPBACK_NAMES.map((n) => [n, '127.0.0.1'])), 'private.test': '10.9.9.9' });
  svc = new Service({
    VESSEL_EGRESS_ALLOW_CIDRS: '127.0.0.0/8',
    VESSEL_DNS_OVERRIDES: up.overridesFile,
    VESSEL_EGRESS_EXTRA_CA: up.caFile,
    VESSEL_ICMP_AUDIT_SECS: '1',
    VESSEL_LOG_LEVEL: 'debug',
  });
  await svc.start();
}, { timeout: 900_000 });
after(async () => {
  await svc?.destroy();
  up.close();
});

interface Run {
  exit_code: number;
  stdout: string;
  stderr: string;
}

async function sh(rt: string, command: string): Promise<Run> {
  const r = await svc.call('POST', `/v1/runtimes/${rt}/exec`, { command, timeout_secs: 30 });
  assert.equal(r.status, 200, JSON.stringify(r.body));
  return r.body.data;
}

async function runtime(name: string, allowed: string[], enabled = true): Promise<string> {
  const r = await svc.call('POST', '/v1/runtimes', { display_name: name, egress_policy: { enabled, allowed_hosts: allowed } });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return name;
}

async function auditsNow(rt: string): Promise<any[]> {
  const r = await svc.call('GET', `/v1/audits?category=egress&runtime=${rt}&limit=1000`);
  assert.equal(r.status, 200);
  return r.body.data.map((a: any) => ({ kind: a.payload.egress.kind, ...a.payload.egress[a.payload.egress.kind] }));
}

/**
 * The runtime's egress audits once `seen` holds of them: an audit is written as its connection
 * ends, after the guest's command may have returned. After 20 s, the audits as they are, for the
 * caller's assertions to name what is missing.
 */
async function auditsOnce(rt: string, seen: (audits: any[]) => boolean): Promise<any[]> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const found = await auditsNow(rt);
    if (seen(found) || Date.now() > deadline) return found;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** The first audit that `matches`, once it is written. */
const auditWhere = async (rt: string, matches: (audit: any) => boolean): Promise<any> => (await auditsOnce(rt, (a) => a.some(matches))).find(matches);

/** Every audit of the runtime, after a pause long enough for one still being written: for what must not be there. */
async function settledAudits(rt: string): Promise<any[]> {
  await new Promise((r) => setTimeout(r, 600));
  return auditsNow(rt);
}

const curl = (args: string) => `curl -sS -m 8 ${args}`;

test('an allowed host answers over HTTP, and the request is audited', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-allow', ['api.test']);
  const r = await sh(rt, curl(`http://api.test:${HTTP}/allowed?q=1`));
  assert.equal(r.exit_code, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout).url, '/allowed?q=1');
  const a = await auditWhere(rt, (x) => x.kind === 'http_request' && x.path === '/allowed');
  assert.ok(a, 'http_request audit');
  assert.equal(a.action, 'allow');
  assert.equal(a.host, 'api.test');
  assert.equal(a.ip, '127.0.0.1');
  assert.equal(a.port, HTTP);
  assert.equal(a.method, 'GET');
  assert.equal(a.status, 200);
  assert.deepEqual(a.rule_ids, []);
});

test('a host not on the list: NXDOMAIN, and 403 when named in Host', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-deny', ['api.test']);
  const dns = await sh(rt, curl(`http://other.test:${HTTP}/denied`));
  assert.equal(dns.exit_code, 6, 'could not resolve');
  const spoofed = await sh(rt, curl(`-o /dev/null -w '%{http_code}' -H 'Host: other.test' http://api.test:${HTTP}/denied`));
  assert.equal(spoofed.stdout, '403');
  assert.equal(up.hits('/denied').length, 0, 'nothing reached the upstream');
  const a = await auditWhere(rt, (x) => x.kind === 'http_request' && x.path === '/denied');
  assert.equal(a?.action, 'deny');
  assert.equal(a?.reason, 'host_not_allowed');
});

test('a wildcard matches subdomains at any depth, never the apex', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-wild', ['*.wild.test']);
  assert.equal((await sh(rt, curl(`http://deep.a.wild.test:${HTTP}/wild`))).exit_code, 0);
  assert.equal((await sh(rt, curl(`http://wild.test:${HTTP}/apex`))).exit_code, 6);
  assert.equal(up.hits('/apex').length, 0);
});

test('a PATCHed policy applies to the next connection', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-patch', ['api.test']);
  assert.equal((await sh(rt, curl(`http://other.test:${HTTP}/patch`))).exit_code, 6);
  const p = await svc.call('PATCH', `/v1/runtimes/${rt}`, { egress_policy: { enabled: true, allowed_hosts: ['api.test', 'other.test'] } });
  assert.equal(p.status, 200, JSON.stringify(p.body));
  assert.equal((await sh(rt, curl(`http://other.test:${HTTP}/patch`))).exit_code, 0);
  await svc.call('PATCH', `/v1/runtimes/${rt}`, { egress_policy: { enabled: true, allowed_hosts: ['other.test'] } });
  const r = await sh(rt, curl(`-o /dev/null -w '%{http_code}' http://api.test:${HTTP}/patch-removed`));
  assert.notEqual(r.stdout, '200');
  assert.equal(up.hits('/patch-removed').length, 0);
});

const PY_TCP = (target: string, port: number) => `python3 -c "
import socket,sys
try:
    s=socket.create_connection(('${target}',${port}),timeout=5); s.sendall(b'ping'); d=s.recv(100)
    print('got:'+d.decode() if d else 'closed')
except Exception as e:
    print('error:'+type(e).__name__)
"`;

test('raw TCP reaches an address DNS pinned to an allowed name, and nothing else', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-raw', ['raw.test']);
  assert.equal((await sh(rt, PY_TCP('raw.test', TCP))).stdout.trim(), 'got:echo:ping');
  const unpinned = (await sh(rt, PY_TCP('198.18.200.200', TCP))).stdout.trim();
  assert.match(unpinned, /^(closed|error:ConnectionResetError|error:BrokenPipeError)$/);
  const allowed = (x: any) => x.kind === 'tcp_connection' && x.action === 'allow' && x.host === 'raw.test' && x.port === TCP;
  const denied = (x: any) => x.kind === 'tcp_connection' && x.action === 'deny' && x.ip === '198.18.200.200' && x.reason === 'not_resolved_by_gateway';
  const a = await auditsOnce(rt, (all) => all.some(allowed) && all.some(denied));
  assert.ok(a.some(allowed));
  assert.ok(a.some(denied));
});

test('IP literals, loopback, metadata and their disguised forms never reach the host', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-literal', ['*']);
  const before = up.seen.length;
  for (const target of ['127.0.0.1', '169.254.169.254', '2852039166', '0xa9fea9fe', '0251.0376.0251.0376', '[::1]', '[::ffff:127.0.0.1]', '2130706433']) {
    const r = await sh(rt, curl(`-g -o /dev/null -w '%{http_code}' http://${target}:${HTTP}/literal`));
    assert.ok(r.exit_code !== 0 || r.stdout === '403', `${target}: exit ${r.exit_code}, status ${r.stdout}`);
  }
  assert.equal(up.seen.length, before, 'the upstream on the host loopback saw nothing');
  assert.ok(await auditWhere(rt, (x) => x.action === 'deny' && x.port === HTTP), 'the metadata address attempts are audited as denied');
});

test('DNS rebinding: a name whose answer turns private is refused', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-rebind', ['rebind.test']);
  const first = await sh(rt, `getent hosts rebind.test | cut -d' ' -f1`);
  const shown = first.stdout.trim();
  assert.ok(shown !== '', 'resolved first');
  assert.equal((await sh(rt, curl(`http://rebind.test:${HTTP}/rebind-1`))).exit_code, 0);
  up.setNames({ ...Object.fromEntries(LOOPBACK_NAMES.map((n) => [n, '127.0.0.1'])), 'rebind.test': '192.168.77.77' });
  try {
    const again = await sh(rt, curl(`--resolve rebind.test:${HTTP}:${shown} -o /dev/null -w '%{http_code}' http://rebind.test:${HTTP}/rebind-2`));
    assert.equal(again.stdout, '403');
    assert.equal(up.hits('/rebind-2').length, 0);
    const a = await auditWhere(rt, (x) => x.path === '/rebind-2');
    assert.equal(a?.reason, 'private_address');
  } finally {
    up.setNames({ ...Object.fromEntries(LOOPBACK_NAMES.map((n) => [n, '127.0.0.1'])), 'private.test': '10.9.9.9' });
  }
});

test('DNS over TCP answers like UDP', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-dnstcp', ['api.test']);
  const query = (name: string) => `python3 -c "
import socket, struct
q = struct.pack('>HHHHHH', 0x1234, 0x0100, 1, 0, 0, 0) + b''.join(bytes([len(l)]) + l.encode() for l in '${name}'.split('.')) + b'\\x00' + struct.pack('>HH', 1, 1)
s = socket.create_connection(('10.127.0.1', 53), timeout=5); s.sendall(struct.pack('>H', len(q)) + q)
n = struct.unpack('>H', s.recv(2))[0]; r = b''
while len(r) < n: r += s.recv(n - len(r))
print(r[3] & 15, struct.unpack('>H', r[6:8])[0])"`;
  assert.equal((await sh(rt, query('api.test'))).stdout, '0 1\n', 'NOERROR with one answer');
  assert.equal((await sh(rt, query('other.test'))).stdout, '3 0\n', 'NXDOMAIN');
});

test('after kill -9 and a restart the rules are rebuilt, and a stale TAP of ours is removed', { timeout: 300_000 }, async () => {
  const created = await svc.call('POST', '/v1/runtimes', { display_name: 'eg-restart', egress_policy: { enabled: true, allowed_hosts: ['api.test'] } });
  assert.equal(created.status, 201);
  const links = JSON.parse(await runCommand('ip', ['-j', 'link', 'show'])) as Array<{ ifname: string; ifalias?: string }>;
  const own = links.find((l) => l.ifalias?.endsWith(`:${created.body.data.id}`));
  assert.ok(own, 'the runtime has a TAP labelled with it');
  const instance = own.ifalias!.split(':')[0];
  // One an interrupted run of this test left (another instance's) would make the add fail.
  await runCommand('ip', ['link', 'del', 'vsl64999']).catch(() => undefined);
  await runCommand('ip', ['tuntap', 'add', 'dev', 'vsl64999', 'mode', 'tap']);
  await runCommand('ip', ['link', 'set', 'dev', 'vsl64999', 'alias', `${instance}:${randomUUID()}`]);
  await svc.kill9();
  await svc.start();
  assert.equal((await sh('eg-restart', curl(`http://api.test:${HTTP}/after-restart`))).exit_code, 0);
  assert.equal((await sh('eg-restart', curl(`http://other.test:${HTTP}/after-restart`))).exit_code, 6);
  const spoofed = await sh('eg-restart', curl(`-o /dev/null -w '%{http_code}' -H 'Host: other.test' http://api.test:${HTTP}/after-restart-denied`));
  assert.equal(spoofed.stdout, '403');
  const gone = await runCommand('ip', ['link', 'show', 'vsl64999']).then(() => false, () => true);
  assert.ok(gone, 'the stale TAP was removed');
});

test('the gateway is a process of its own, as vessel-gateway with no capabilities; kill -9 of it costs its connections, never a runtime or the API', { timeout: 300_000 }, async () => {
  const created = await svc.call('POST', '/v1/runtimes', { display_name: 'eg-part', egress_policy: { enabled: true, allowed_hosts: ['api.test'] }, ingress_specs: [{ protocol: 'http', runtime_port: 8000 }] });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.data.id as string;
  await sh('eg-part', 'nohup python3 -m http.server 8000 --directory /etc >/dev/null 2>&1 & echo $! > /root/server.pid');
  assert.equal((await ingressWhenUp(`8000-${id}.localhost`)).status, 200);
  assert.equal((await sh('eg-part', curl(`http://api.test:${HTTP}/before-gateway-kill`))).exit_code, 0);

  const first = svc.partPid('gateway');
  assert.ok(first !== null, 'the gateway runs as a child of the service');
  await assertUnprivilegedPart(first, 'vessel-gateway');

  process.kill(first, 'SIGKILL');
  // The API never depended on the gateway's process: it answers while that one is started again.
  const during = await svc.call('GET', '/v1/runtimes/eg-part');
  assert.equal(during.status, 200);
  assert.equal(during.body.data.status, 'running');
  const next = await svc.partStartedAgain('gateway', first);
  assert.ok(next !== null && next !== first, 'a new gateway process was started');

  // The new process serves the runtime it never saw attached: egress, its audit, and ingress.
  let egress = await sh('eg-part', curl(`http://api.test:${HTTP}/after-gateway-kill`));
  for (let i = 0; i < 20 && egress.exit_code !== 0; i++) egress = await sh('eg-part', curl(`http://api.test:${HTTP}/after-gateway-kill`));
  assert.equal(egress.exit_code, 0, egress.stderr);
  assert.equal((await sh('eg-part', curl(`http://other.test:${HTTP}/after-gateway-kill`))).exit_code, 6, 'a host not allowed is still refused');
  assert.ok(await auditWhere('eg-part', (a) => a.path === '/after-gateway-kill' && a.action === 'allow'), 'audited after the restart');
  assert.equal((await ingressWhenUp(`8000-${id}.localhost`)).status, 200);
  // The same VM: the server started before the kill still runs.
  assert.equal((await sh('eg-part', 'kill -0 $(cat /root/server.pid) && echo alive')).stdout.trim(), 'alive');
  assert.equal(svc.partPid('gateway'), next, 'and the gateway stays up');
});

test('the API is a process of its own, as vessel-api with no capabilities and no key of root\'s; kill -9 of it costs its requests, never a runtime, its network or its files', { timeout: 300_000 }, async () => {
  const created = await svc.call('POST', '/v1/runtimes', { display_name: 'eg-api', egress_policy: { enabled: true, allowed_hosts: ['api.test'] }, ingress_specs: [{ protocol: 'http', runtime_port: 8000 }] });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.data.id as string;
  await sh('eg-api', 'nohup python3 -m http.server 8000 --directory /etc >/dev/null 2>&1 & echo $! > /root/server.pid');
  assert.equal((await ingressWhenUp(`8000-${id}.localhost`)).status, 200);
  const put = await fetch(`${svc.url}/v1/runtimes/eg-api/files?path=/root/kept.txt`, { method: 'PUT', headers: { authorization: `Bearer ${svc.token}` }, body: 'kept across the API crash' });
  assert.equal(put.status, 200);

  const first = svc.partPid('api');
  assert.ok(first !== null, 'the API runs as a child of the service');
  await assertUnprivilegedPart(first, 'vessel-api');
  // What its user may not touch: root's keys, and the data directory but for its own store.
  for (const file of ['master.key', 'ca.key', 'admin-token']) {
    await assert.rejects(runCommand('runuser', ['-u', 'vessel-api', '--', 'cat', join(svc.dataDir, file)]), /./, `vessel-api cannot read ${file}`);
  }
  await assert.rejects(runCommand('runuser', ['-u', 'vessel-api', '--', 'touch', join(svc.dataDir, 'planted')]), /./, 'nor write the data directory');
  await assert.rejects(runCommand('runuser', ['-u', 'vessel-api', '--', 'ls', join(svc.dataDir, 'runtimes')]), /./, "nor read the VMs' files");
  const [gateway, agent] = [svc.partPid('gateway'), svc.partPid('agent')];

  // Egress runs on while the API is away; what is audited meanwhile must reach the next API's store.
  const during = 40;
  await sh('eg-api', `nohup sh -c 'for i in $(seq 1 ${during}); do curl -s -o /dev/null -m 8 http://api.test:${HTTP}/during-api-kill-$i; sleep 0.1; done; touch /root/loop.done' >/dev/null 2>&1 &`);
  const killedAt = Date.now();
  process.kill(first, 'SIGKILL');
  const next = await svc.partStartedAgain('api', first);
  assert.ok(next !== null && next !== first, 'a new API process was started');
  let back = await svc.call('GET', '/v1/runtimes/eg-api').catch(() => null);
  for (let i = 0; i < 300 && back?.status !== 200; i++) {
    await new Promise((r) => setTimeout(r, 100));
    back = await svc.call('GET', '/v1/runtimes/eg-api').catch(() => null);
  }
  assert.equal(back?.status, 200);
  const backAt = Date.now();
  let done = await sh('eg-api', 'test -e /root/loop.done && echo done');
  for (let i = 0; i < 120 && done.stdout.trim() !== 'done'; i++) {
    await new Promise((r) => setTimeout(r, 250));
    done = await sh('eg-api', 'test -e /root/loop.done && echo done');
  }
  assert.equal(done.stdout.trim(), 'done', "the guest's requests ended");
  const duringKill = await (async () => {
    for (let i = 0; ; i++) {
      const listed = await svc.call('GET', '/v1/audits?category=egress&runtime=eg-api&limit=1000');
      assert.equal(listed.status, 200);
      const found = listed.body.data.filter((a: any) => /^\/during-api-kill-\d+$/.test(a.payload.egress.http_request?.path ?? ''));
      if (found.length >= during || i >= 80) return found;
      await new Promise((r) => setTimeout(r, 250));
    }
  })();
  const paths = duringKill.map((a: any) => a.payload.egress.http_request.path as string).sort();
  assert.deepEqual(paths, Array.from({ length: during }, (_, i) => `/during-api-kill-${i + 1}`).sort(), 'every request made while the API was away is audited, once');
  const whileAway = duringKill.filter((a: any) => Date.parse(a.created_at) > killedAt && Date.parse(a.created_at) < backAt).length;
  assert.ok(whileAway > 0, `some of the audits were made while the API process was away (${whileAway})`);
  assert.equal(back.body.data.status, 'running', 'the VM was taken back, not marked crashed');
  // The same VM, its files and its processes; its network never went away.
  assert.equal((await sh('eg-api', 'kill -0 $(cat /root/server.pid) && cat /root/kept.txt')).stdout, 'kept across the API crash');
  assert.equal((await sh('eg-api', curl(`http://api.test:${HTTP}/after-api-kill`))).exit_code, 0);
  assert.ok(await auditWhere('eg-api', (a) => a.path === '/after-api-kill' && a.action === 'allow'), 'audited through the new API process');
  assert.equal((await ingressWhenUp(`8000-${id}.localhost`)).status, 200);
  assert.deepEqual([svc.partPid('gateway'), svc.partPid('agent')], [gateway, agent], 'the other parts ran on');
  // And what users do next: a new runtime, on the restarted API.
  const after = await svc.call('POST', '/v1/runtimes', { display_name: 'eg-api-after' });
  assert.equal(after.status, 201, JSON.stringify(after.body));
  assert.equal((await sh('eg-api-after', 'echo fresh')).stdout, 'fresh\n');
  await svc.call('DELETE', '/v1/runtimes/eg-api-after');
});

test('uppercase and trailing-dot names are the same host', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-case', ['api.test']);
  assert.equal((await sh(rt, curl(`http://API.Test.:${HTTP}/case`))).exit_code, 0);
  const a = await auditWhere(rt, (x) => x.path === '/case');
  assert.equal(a?.host, 'api.test');
});

test('a CL+TE smuggling attempt is refused with 400 and reaches nothing', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-smuggle', ['api.test']);
  const payload = 'POST /smuggle HTTP/1.1\\r\\nHost: api.test\\r\\nContent-Length: 4\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n0\\r\\n\\r\\nGET /smuggled HTTP/1.1\\r\\nHost: api.test\\r\\n\\r\\n';
  const r = await sh(rt, `python3 -c "
import socket
s=socket.create_connection(('api.test',${HTTP}),timeout=5); s.sendall(b'${payload}')
print(s.recv(200).decode().split('\\r\\n')[0])"`);
  assert.match(r.stdout, /^HTTP\/1\.1 400/, r.stdout + r.stderr);
  assert.equal(up.hits('/smuggle').length, 0);
});

test('UDP other than DNS is dropped; ICMP is dropped and audited with a count', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-udp', ['*']);
  const udp = createSocket('udp4');
  let received = 0;
  udp.on('message', () => received++);
  await new Promise<void>((r) => udp.bind(0, '0.0.0.0', () => r()));
  const port = udp.address().port;
  try {
    await sh(rt, `python3 -c "
import socket
s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)
for ip in ('10.127.0.1','8.8.8.8','127.0.0.53'): s.sendto(b'x',(ip,${port}))"`);
    const ping = await sh(rt, 'ping -c 3 -i 0.2 -W 1 1.1.1.1');
    assert.notEqual(ping.exit_code, 0);
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(received, 0);
  } finally {
    udp.close();
  }
  // Aggregated per interval: the three pings may straddle two intervals.
  const deadline = Date.now() + 10_000;
  let counted = 0;
  while (Date.now() < deadline && counted < 3) {
    await new Promise((r) => setTimeout(r, 500));
    const icmp = (await auditsNow(rt)).filter((x) => x.kind === 'icmp_drop');
    assert.ok(icmp.every((x) => x.action === 'deny' && x.count >= 1));
    counted = icmp.reduce((n, x) => n + x.count, 0);
  }
  assert.equal(counted, 3);
});

test('enabled: false passes traffic without audits, and still never to private ranges', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-open', [], false);
  assert.equal((await sh(rt, curl(`http://open.test:${HTTP}/open`))).exit_code, 0);
  const priv = await sh(rt, curl(`-o /dev/null -w '%{http_code}' http://192.168.1.1:80/`));
  assert.notEqual(priv.exit_code, 0, 'refused');
  assert.deepEqual(await settledAudits(rt), []);
});

async function putFile(rt: string, path: string, body: string | Buffer): Promise<void> {
  const put = await fetch(`${svc.url}/v1/runtimes/${rt}/files?path=${path}`, {
    method: 'PUT',
    headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/octet-stream' },
    body: typeof body === 'string' ? body : new Uint8Array(body),
  });
  assert.equal(put.status, 200);
}

/** Puts the upstreams' test CA in the guest: alone in /root/upstream-ca.crt, with the gateway's in /root/both.crt. */
async function trustUpstream(rt: string): Promise<void> {
  await putFile(rt, '/root/upstream-ca.crt', readFileSync(up.caFile));
  await sh(rt, 'cat /etc/ssl/certs/ca-certificates.crt /root/upstream-ca.crt > /root/both.crt');
}

test('TLS to an allowed host without rules is spliced: the guest sees the upstream certificate', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-splice', ['api.test']);
  await trustUpstream(rt);
  const r = await sh(rt, curl(`--cacert /root/upstream-ca.crt https://api.test:${HTTPS}/spliced`));
  assert.equal(r.exit_code, 0, r.stderr);
  const a = await auditWhere(rt, (x) => x.kind === 'tcp_connection' && x.port === HTTPS);
  assert.equal(a?.reason, 'host_allowed');
});

async function secretRule(rt: string, injection: Record<string, string>, path?: string): Promise<string> {
  const name = `key-${rt}-${randomBytes(3).toString('hex')}`;
  const s = await svc.call('POST', '/v1/secrets', { name, value: SECRET });
  assert.equal(s.status, 201, JSON.stringify(s.body));
  const r = await svc.call('POST', `/v1/runtimes/${rt}/secret-injection-rules`, { host: 'api.test', secret: name, injection, ...(path ? { path } : {}) });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  return r.body.data.id;
}

test('injection over intercepted TLS: header replaced not duplicated, query parameter, every keep-alive request', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-inject', ['api.test']);
  const ruleId = await secretRule(rt, { headerName: 'X-Api-Key', valueFormat: 'Bearer ${credential}', paramName: 'key' });
  const r = await sh(rt, curl(`-H 'x-api-key: guest-value' https://api.test:${HTTPS}/inject-1?a=1 https://api.test:${HTTPS}/inject-2 -w '\\n%{num_connects}\\n'`));
  assert.equal(r.exit_code, 0, r.stderr);
  for (const path of ['/inject-1', '/inject-2']) {
    const seen = up.hits(path)[0];
    assert.ok(seen, `${path} reached the upstream`);
    assert.equal(seen.scheme, 'https');
    const keys = [];
    for (let i = 0; i < seen.rawHeaders.length; i += 2) if (seen.rawHeaders[i]!.toLowerCase() === 'x-api-key') keys.push(seen.rawHeaders[i + 1]);
    assert.deepEqual(keys, [`Bearer ${SECRET}`], 'one header, the injected one');
    assert.equal(new URL(seen.url, 'http://x').searchParams.get('key'), SECRET);
  }
  assert.equal(new URL(up.hits('/inject-1')[0]!.url, 'http://x').searchParams.get('a'), '1');
  const injected = (x: any) => x.kind === 'http_request' && x.path.startsWith('/inject-');
  // Both written, then none more: exactly one audit a request.
  await auditsOnce(rt, (all) => all.filter(injected).length >= 2);
  const a = (await settledAudits(rt)).filter(injected);
  assert.equal(a.length, 2);
  for (const x of a) assert.deepEqual(x.rule_ids, [ruleId]);
});

test('a path pattern holds against dot segments and encoded dots', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-path', ['api.test']);
  await secretRule(rt, { headerName: 'X-Api-Key' }, '/api/**');
  await sh(rt, curl(`--path-as-is https://api.test:${HTTPS}/api/ok https://api.test:${HTTPS}/api/../admin-dot https://api.test:${HTTPS}/api/%2e%2e/admin-enc`));
  const injected = (p: string) => up.hits(p).some((s) => s.rawHeaders.some((h) => h === SECRET));
  assert.equal(injected('/api/ok'), true);
  const dot = up.seen.filter((s) => s.url.includes('admin-dot'));
  const enc = up.seen.filter((s) => s.url.includes('admin-enc'));
  assert.ok(dot.length + enc.length > 0, 'the requests went through');
  for (const s of [...dot, ...enc]) assert.ok(!s.rawHeaders.includes(SECRET), `${s.url} got no secret`);
});

test('SNI must equal Host on intercepted connections; the CA variables let any client trust interception', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-sni', ['api.test', 'other.test']);
  await secretRule(rt, { headerName: 'X-Api-Key' });
  const py = await sh(rt, `python3 -c "
import os, urllib.request
print(os.environ['SSL_CERT_FILE'], os.environ['REQUESTS_CA_BUNDLE'], os.environ['NODE_EXTRA_CA_CERTS'])
print(urllib.request.urlopen('https://api.test:${HTTPS}/py-env').status)"`);
  assert.equal(py.exit_code, 0, py.stderr);
  assert.equal(py.stdout, '/etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt /usr/local/share/ca-certificates/vessel-egress-ca.crt\n200\n');
  assert.ok(up.hits('/py-env')[0]?.rawHeaders.includes(SECRET), 'python went through interception and got the header');
  const r = await sh(rt, curl(`-o /dev/null -w '%{http_code}' -H 'Host: other.test' https://api.test:${HTTPS}/sni-mismatch`));
  assert.equal(r.stdout, '403');
  assert.equal(up.hits('/sni-mismatch').length, 0);
  const a = await auditWhere(rt, (x) => x.path === '/sni-mismatch');
  assert.equal(a?.reason, 'sni_host_mismatch');
});

test('a redirect to another host is passed back, not followed, and the secret does not go there', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-redirect', ['api.test', 'other.test']);
  await secretRule(rt, { headerName: 'X-Api-Key' });
  // other.test has no rule, so its TLS is spliced and the guest sees the upstream's own certificate.
  await trustUpstream(rt);
  const r = await sh(rt, curl(`--cacert /root/both.crt -L -o /dev/null -w '%{http_code} %{num_redirects}' 'https://api.test:${HTTPS}/redirect?to=https://other.test:${HTTPS}/landing'`));
  assert.equal(r.exit_code, 0, r.stderr);
  assert.equal(r.stdout, '200 1');
  const landing = up.hits('/landing');
  assert.equal(landing.length, 1, 'the guest followed it itself');
  assert.ok(!landing[0]!.rawHeaders.includes(SECRET));
});

test('the secret is nowhere the guest, a response, an audit or a log line could show it', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-leak', ['api.test']);
  await secretRule(rt, { headerName: 'X-Api-Key' });
  await sh(rt, curl(`https://api.test:${HTTPS}/leak-check -o /root/out.json`));
  assert.ok(up.hits('/leak-check')[0]?.rawHeaders.includes(SECRET), 'it was injected');
  // The upstream echo includes the header, so the guest's copy of the response has it; remove
  // that file and search everything else the guest has.
  await sh(rt, 'rm /root/out.json');
  const grep = await sh(rt, `grep -rlsF '${SECRET}' /root /tmp /etc /var /run /home /usr/local; echo done`);
  assert.equal(grep.stdout.trim(), 'done');
  const everything = JSON.stringify([
    (await svc.call('GET', '/v1/audits?limit=1000')).body,
    (await svc.call('GET', '/v1/secrets?limit=1000')).body,
    (await svc.call('GET', `/v1/runtimes/${rt}/secret-injection-rules`)).body,
  ]);
  assert.ok(!everything.includes(SECRET));
  assert.ok(!svc.log.includes(SECRET), 'not in the service log (debug level)');
});

/** An upgrade-only server for the guest: answers 101 to `Upgrade: echo`, then echoes. */
const UPGRADE_SERVER = [
  'import socket',
  's = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); s.bind(("0.0.0.0", 8001)); s.listen()',
  'while True:',
  '    c, _ = s.accept(); head = b""',
  '    while b"\\r\\n\\r\\n" not in head: head += c.recv(1024)',
  '    c.sendall(b"HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: echo\\r\\nConnection: Upgrade\\r\\n\\r\\n")',
  '    while True:',
  '        d = c.recv(1024)',
  '        if not d: break',
  '        c.sendall(d)',
  '    c.close()',
  '',
].join('\n');

/** The first answer that is not an error from the gateway while the guest's server starts. */
async function ingressWhenUp(host: string): Promise<{ status: number; body: string }> {
  const deadline = Date.now() + 60_000;
  let r = await ingressGet(host, false);
  while (r.status === 503 && Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 500));
    r = await ingressGet(host, false);
  }
  return r;
}

function ingressGet(host: string, tls: boolean): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const opts = { host: '127.0.0.1', port: svc.ingressPort, path: '/', headers: { host } };
    const onResponse = (res: import('node:http').IncomingMessage) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    };
    const req = tls
      ? httpsRequest({ ...opts, servername: host, ca: readFileSync(join(svc.dataDir, 'ca.crt')) }, onResponse)
      : httpRequest(opts, onResponse);
    req.on('error', reject);
    req.end();
  });
}

test('ingress: http and https specs reach their guest ports, and nothing else does', { timeout: 300_000 }, async () => {
  const r = await svc.call('POST', '/v1/runtimes', {
    display_name: 'web',
    ingress_specs: [{ protocol: 'http', runtime_port: 8000 }, { protocol: 'https', runtime_port: 8443 }, { protocol: 'http', runtime_port: 8001 }],
  });
  assert.equal(r.status, 201, JSON.stringify(r.body));
  await sh('web', 'for p in 8000 8443 9000; do nohup python3 -m http.server $p --directory /etc >/dev/null 2>&1 & done; true');
  await putFile('web', '/root/upgrade.py', UPGRADE_SERVER);
  await sh('web', 'nohup python3 /root/upgrade.py >/dev/null 2>&1 & true');
  const id = r.body.data.id as string;
  const plain = await ingressWhenUp(`8000-${id}.localhost`);
  assert.equal(plain.status, 200);
  assert.match(plain.body, /hostname/, 'the guest directory listing of /etc');
  const secure = await ingressGet(`8443-${id}.localhost`, true);
  assert.equal(secure.status, 200, 'TLS terminated with a certificate the service CA signed');
  assert.equal((await ingressGet(`9000-${id}.localhost`, false)).status, 404, 'a port not in ingress_specs');
  assert.equal((await ingressGet(`8443-${id}.localhost`, false)).status, 404, 'an https port over plain HTTP');
  assert.equal((await ingressGet(`8000-${randomUUID()}.localhost`, false)).status, 404);
  assert.equal((await ingressGet('8000-web.localhost', false)).status, 404, 'a display name routes nowhere');
  assert.equal((await ingressGet(`${id}.localhost`, false)).status, 404);

  // An upgrade (what WebSockets use) passes through to the guest, then bytes flow both ways.
  const echoed = await new Promise<string>((resolve, reject) => {
    const sock = connect(svc.ingressPort, '127.0.0.1');
    let got = '';
    sock.setTimeout(20_000, () => reject(new Error(`no echo: ${got}`)));
    sock.on('data', (d) => {
      got += d.toString();
      if (got.endsWith('\r\n\r\n')) sock.write('ping');
      if (got.endsWith('ping')) {
        sock.destroy();
        resolve(got);
      }
    });
    sock.on('error', reject);
    sock.write(`GET /ws HTTP/1.1\r\nHost: 8001-${id}.localhost\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n`);
  });
  assert.match(echoed, /^HTTP\/1\.1 101/);
});

/**
 * Sends raw HTTP requests on one connection (TLS when asked), reading each response before the
 * next request: `python3 /root/rawhttp.py HOST PORT plain|tls REQUESTS.json` prints one JSON list.
 */
const RAW_HTTP_CLIENT = `import http.client, json, socket, ssl, sys
host, port, mode, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
# The context first: loading the CA bundle takes longer under TCG than the gateway waits for a
# client's first bytes before it takes the connection for a server-first protocol.
context = ssl.create_default_context() if mode == 'tls' else None
s = socket.create_connection((host, port), timeout=5)
if context is not None:
    s = context.wrap_socket(s, server_hostname=host)
out = []
for raw in json.load(open(path)):
    try:
        s.sendall(raw.encode('latin1'))
        r = http.client.HTTPResponse(s, method=raw.split(' ', 1)[0])
        r.begin()
        out.append({'status': r.status, 'headers': r.getheaders(), 'body': r.read().decode('latin1')})
    except Exception as e:
        out.append({'error': type(e).__name__})
        break
print(json.dumps(out))
`;

interface RawReply {
  status?: number;
  headers?: Array<[string, string]>;
  body?: string;
  error?: string;
}

async function rawHttp(rt: string, host: string, port: number, tls: boolean, requests: string[]): Promise<RawReply[]> {
  const file = `/root/requests-${randomBytes(4).toString('hex')}.json`;
  await putFile(rt, '/root/rawhttp.py', RAW_HTTP_CLIENT);
  await putFile(rt, file, JSON.stringify(requests));
  const r = await sh(rt, `python3 /root/rawhttp.py ${host} ${port} ${tls ? 'tls' : 'plain'} ${file}`);
  assert.equal(r.exit_code, 0, r.stderr);
  return JSON.parse(r.stdout) as RawReply[];
}

/** A GET whose chunked body is a whole second request: what a smuggler sends. */
function chunkedCarrier(path: string, host: string, inner: string): string {
  return `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nTransfer-Encoding: chunked\r\n\r\n${Buffer.byteLength(inner).toString(16)}\r\n${inner}\r\n0\r\n\r\n`;
}

const hostValues = (rawHeaders: string[]): string[] => rawHeaders.flatMap((h, i) => (i % 2 === 0 && h.toLowerCase() === 'host' ? [rawHeaders[i + 1]!] : []));

test('a chunked body on GET is forwarded chunked: a request hidden in it reaches the upstream only as body', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-te-smuggle', ['api.test']);
  await secretRule(rt, { headerName: 'X-Api-Key' });
  const inner = 'POST /te-smuggled HTTP/1.1\r\nHost: evil.test\r\nContent-Length: 600\r\n\r\n';
  const plainHost = `api.test:${RECORDED}`;
  const plain = await rawHttp(rt, 'api.test', RECORDED, false, [chunkedCarrier('/te-carrier', plainHost, inner), `GET /te-next HTTP/1.1\r\nHost: ${plainHost}\r\n\r\n`]);
  assert.deepEqual(plain.map((x) => x.status), [200, 200], JSON.stringify(plain));
  assert.equal(up.hits('/te-smuggled').length, 0, 'the hidden request never reached the upstream as a request');
  assert.equal(up.hits('/te-carrier')[0]?.body, inner, 'it arrived as the body of the request that carried it');
  assert.match(up.received, /GET \/te-carrier HTTP\/1\.1\r\n[^]*?transfer-encoding: chunked\r\n/i, 'framed explicitly');

  // The same over intercepted TLS, where the next request carries the secret.
  const tlsHost = `api.test:${HTTPS}`;
  const tls = await rawHttp(rt, 'api.test', HTTPS, true, [
    chunkedCarrier('/te-tls-carrier', tlsHost, inner.replace('/te-smuggled', '/te-tls-smuggled')),
    `GET /te-tls-next HTTP/1.1\r\nHost: ${tlsHost}\r\n\r\n`,
  ]);
  assert.deepEqual(tls.map((x) => x.status), [200, 200], JSON.stringify(tls));
  assert.equal(up.hits('/te-tls-smuggled').length, 0);
  assert.ok(up.hits('/te-tls-next')[0]?.rawHeaders.includes(SECRET), 'the next request was a request of its own, injected');
  assert.ok(up.seen.every((s) => !s.body.includes(SECRET)), 'no secret inside any body');
});

test('exactly one Host reaches the upstream, the one decided on', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-host', ['api.test']);
  const replies = await rawHttp(rt, 'api.test', HTTP, false, [
    `GET /conn-host HTTP/1.1\r\nHost: API.test.:${HTTP}\r\nConnection: keep-alive, host, content-length\r\n\r\n`,
    `GET /dup-host HTTP/1.1\r\nHost: api.test:${HTTP}\r\nHost: other.test\r\n\r\n`,
  ]);
  assert.equal(replies[0]?.status, 200, JSON.stringify(replies));
  assert.deepEqual(hostValues(up.hits('/conn-host')[0]!.rawHeaders), [`api.test:${HTTP}`], 'a Connection token does not strip Host; the normalized host is sent');
  assert.equal(replies[1]?.status, 400);
  assert.equal(up.hits('/dup-host').length, 0);
  const a = await auditWhere(rt, (x) => x.path === '/dup-host');
  assert.equal(a?.action, 'deny');
  assert.equal(a?.status, 400);
});

test('injected values are redacted from response headers; TRACE is refused', { timeout: 300_000 }, async () => {
  const rt = await runtime('eg-reflect', ['api.test']);
  await secretRule(rt, { headerName: 'X-Api-Key', valueFormat: 'Bearer ${credential}', paramName: 'api_key' });
  const r = await sh(rt, curl(`-D - -o /dev/null 'https://api.test:${HTTPS}/reflect?a=1'`));
  assert.equal(r.exit_code, 0, r.stderr);
  assert.ok(up.hits('/reflect')[0]?.url.includes(SECRET), 'the upstream got the parameter');
  assert.ok(!r.stdout.includes(SECRET), r.stdout);
  assert.match(r.stdout, /^location: \/reflected\/reflect\?a=1&api_key=vessel-redacted\r$/im);
  assert.match(r.stdout, /^x-reflect: vessel-redacted\r$/im);
  const trace = await sh(rt, curl(`-X TRACE -o /dev/null -w '%{http_code}' https://api.test:${HTTPS}/trace`));
  assert.equal(trace.stdout, '405');
  assert.equal(up.hits('/trace').length, 0);
  const a = await auditWhere(rt, (x) => x.path === '/trace');
  assert.equal(a?.action, 'deny');
  assert.equal(a?.status, 405);
});

/** Every TAP of this service instance: name → runtime id. */
async function instanceTaps(instance: string): Promise<Map<string, string>> {
  const links = JSON.parse(await runCommand('ip', ['-j', 'link', 'show'])) as Array<{ ifname: string; ifalias?: string }>;
  return new Map(links.filter((l) => l.ifalias?.startsWith(`${instance}:`)).map((l) => [l.ifname, l.ifalias!.split(':')[1]!]));
}

const identityOf = (tap: string): string => {
  const slot = Number(tap.slice(3));
  return `10.222.${slot >> 8}.${slot & 255}`;
};

test('a deleted runtime leaves no connection, conntrack entry or slot behind for the next one', { timeout: 300_000 }, async () => {
  const created = await svc.call('POST', '/v1/runtimes', { display_name: 'eg-detach', egress_policy: { enabled: true, allowed_hosts: ['api.test', 'raw.test'] } });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const id = created.body.data.id as string;
  // A spliced connection held open, and a keep-alive HTTP connection left idle.
  await putFile('eg-detach', '/root/hold.py', `import http.client, socket, time
raw = socket.create_connection(('raw.test', ${TCP}), timeout=5); raw.sendall(b'hold'); raw.recv(100)
web = http.client.HTTPConnection('api.test', ${HTTP}, timeout=5); web.request('GET', '/detach-keepalive'); web.getresponse().read()
open('/root/held', 'w').write('ok')
time.sleep(600)
`);
  await sh('eg-detach', 'nohup python3 /root/hold.py >/dev/null 2>&1 & for i in $(seq 50); do [ -f /root/held ] && break; sleep 0.2; done; cat /root/held');
  const tcpBefore = new Set(up.tcpOpen);
  assert.ok(tcpBefore.size >= 1, 'the spliced connection is open at the upstream');
  const ownerOf = (await svc.call('GET', '/v1/runtimes?limit=1000')).body.data.map((r: any) => r.id as string);
  const links = JSON.parse(await runCommand('ip', ['-j', 'link', 'show'])) as Array<{ ifname: string; ifalias?: string }>;
  const own = links.find((l) => l.ifalias?.endsWith(`:${id}`))!;
  const instance = own.ifalias!.split(':')[0]!;
  const identity = identityOf(own.ifname);
  const sockets = async () => (await runCommand('ss', ['-Htn', 'dst', identity])).trim();
  // conntrack prints its summary on stderr, which runCommand mixes in: keep the entries only.
  const tracked = async () => (await runCommand('conntrack', ['-L', '--orig-src', identity])).split('\n').filter((l) => /^(tcp|udp)\s/.test(l)).join('\n');
  assert.notEqual(await sockets(), '', 'the gateway holds the guest connections');
  assert.ok(ownerOf.includes(id));

  assert.equal((await svc.call('DELETE', `/v1/runtimes/${id}`)).status, 200);
  const deadline = Date.now() + 3000;
  while (Date.now() < deadline && ((await sockets()) !== '' || [...tcpBefore].some((s) => up.tcpOpen.has(s)))) await new Promise((r) => setTimeout(r, 100));
  assert.equal(await sockets(), '', 'no gateway socket is left with the old identity');
  assert.ok([...tcpBefore].every((s) => !up.tcpOpen.has(s)), 'the spliced connection was closed at the upstream');
  assert.equal(await tracked(), '', 'no conntrack entry is left for the old identity');

  // The next runtimes (and the warm pool refilling behind them) do not get the freed slot.
  const next = await svc.call('POST', '/v1/runtimes', { display_name: 'eg-detach-next', egress_policy: { enabled: true, allowed_hosts: [] } });
  assert.equal(next.status, 201);
  const settle = Date.now() + 20_000;
  let taps = await instanceTaps(instance);
  const runtimes = async () => (await svc.call('GET', '/v1/runtimes?limit=1000')).body.data.length as number;
  // The pool (2 spares) is full again once the instance has two TAPs more than runtimes.
  while (Date.now() < settle && taps.size < (await runtimes()) + 2) {
    await new Promise((r) => setTimeout(r, 250));
    taps = await instanceTaps(instance);
  }
  assert.ok(!taps.has(own.ifname), `${own.ifname} is quarantined, not handed out again`);
});

test('ingress routes by runtime id only: another tenant cannot take a name\'s traffic', { timeout: 300_000 }, async () => {
  const cli = join(REPO_ROOT, 'dist/src/cli/main.js');
  const tenantB = `tenant-b-${randomBytes(3).toString('hex')}`;
  const created = await runCommand(process.execPath, [cli, 'token', 'create', '--tenant', tenantB, '--scopes', 'admin'], { env: { ...process.env, VESSEL_DATA_DIR: svc.dataDir } });
  const other = JSON.parse(created.split('\n').find((l) => l.startsWith('{'))!) as { token: string };
  const spec = { display_name: 'shared-name', ingress_specs: [{ protocol: 'http', runtime_port: 8000 }] };
  const a = await svc.call('POST', '/v1/runtimes', spec);
  assert.equal(a.status, 201, JSON.stringify(a.body));
  const b = await svc.call('POST', '/v1/runtimes', spec, other.token);
  assert.equal(b.status, 201, JSON.stringify(b.body));
  const serve = (owner: string) => `mkdir -p /root/www && echo ${owner} > /root/www/who && (nohup python3 -m http.server 8000 --directory /root/www >/dev/null 2>&1 &) ; true`;
  const exec = async (id: string, token: string, owner: string) => {
    const r = await svc.call('POST', `/v1/runtimes/${id}/exec`, { command: serve(owner), timeout_secs: 30 }, token);
    assert.equal(r.status, 200, JSON.stringify(r.body));
  };
  await exec(a.body.data.id, svc.token, 'tenant-a');
  await exec(b.body.data.id, other.token, 'tenant-b');
  const get = (host: string) => ingressGet(host, false);
  await ingressWhenUp(`8000-${a.body.data.id}.localhost`);
  await ingressWhenUp(`8000-${b.body.data.id}.localhost`);
  assert.equal((await get(`8000-${a.body.data.id}.localhost`)).status, 200);
  assert.equal((await svc.call('DELETE', `/v1/runtimes/${a.body.data.id}`)).status, 200);
  assert.equal((await get('8000-shared-name.localhost')).status, 404, 'the name routes nowhere, before or after the delete');
  assert.equal((await get(`8000-${a.body.data.id}.localhost`)).status, 404, 'a deleted id routes nowhere');
  const bAnswer = await get(`8000-${b.body.data.id}.localhost`);
  assert.equal(bAnswer.status, 200);
  assert.equal((await svc.call('DELETE', `/v1/runtimes/${b.body.data.id}`, undefined, other.token)).status, 200);
});
