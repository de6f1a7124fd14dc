/**
 * The egress gateway's throughput and added latency, in one invocation, against the usual tools:
 * - TLS passthrough (no rule: spliced) against squid as a CONNECT proxy;
 * - TLS interception with header injection against mitmproxy setting the same header.
 *
 * The clients run in network namespaces the bench creates. The gateway's client sits behind a
 * veth whose host end is named and labelled like a runtime TAP, so the real gateway adopts it at
 * restore() and its traffic takes the production path: nftables identity rewrite and redirect,
 * DNS responder, SO_ORIGINAL_DST, sniffing, TLS termination, injection. The baselines' client
 * sits in a second namespace that reaches squid, mitmproxy and the upstream directly.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GUEST_NETWORK, type EgressSubject } from '../src/core/ports.js';
import { identityAddress, slotOfTap } from '../src/net/addressing.js';
import { CertificateAuthority } from '../src/net/certificate-authority.js';
import { Gateway } from '../src/net/gateway.js';
import { runCommand } from '../src/platform/run-command.js';
import { REPO_ROOT, freePort } from '../test/support/service.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const WORKERS = Number(process.env.BENCH_WORKERS ?? 8);
const NS_GATEWAY = 'vbench-gw';
const NS_BASELINE = 'vbench-px';
const BASELINE_HOST = '10.199.0.1';
const TAP = 'vsl65000';
const INSTANCE = 'bench';

// The baselines are other programs: say how to get them before anything is started. Without
// them, only what needs none is measured: interception with body redaction against without.
const missing = ['squid', 'mitmdump'].filter((tool) => spawnSync('sh', ['-c', `command -v ${tool}`]).status !== 0);
const baselines = missing.length === 0;
if (!baselines) {
  console.error(`bench:egress compares against ${missing.join(' and ')}, which this host lacks (apt-get install squid mitmproxy); measuring body redaction's cost alone`);
}
/** The response sizes the redaction rows use: the bench's usual tiny body, and 64 KiB. */
const REDACTION_BODIES = [0, 65_536];

const dir = mkdtempSync(join(tmpdir(), 'vessel-bench-egress-'));
const children: ChildProcess[] = [];
const ip = (lines: string[], ns?: string) => runCommand('ip', [...(ns === undefined ? [] : ['-n', ns]), '-batch', '-'], { input: lines.join('\n') + '\n' });

/** The client's side of a namespace link: eth0 with an address and a default route. */
const clientSide = (ns: string, address: string, gateway: string) =>
  ip(['link set lo up', 'link set eth0 up', `addr add ${address} dev eth0`, `route add default via ${gateway}`], ns);

function start(cmd: string, args: string[], ready: RegExp | null): Promise<ChildProcess> {
  const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  if (ready === null) return Promise.resolve(child);
  return new Promise((resolve, reject) => {
    let out = '';
    const onData = (d: Buffer) => {
      out += d.toString();
      if (ready.test(out)) resolve(child);
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', onData);
    child.once('exit', (code) => reject(new Error(`${cmd} exited (${code}):\n${out}`)));
  });
}

async function waitForPort(ns: string | null, host: string, port: number): Promise<void> {
  const probe = `require('net').connect(${port}, '${host}').on('connect', () => process.exit(0)).on('error', () => process.exit(1))`;
  for (let i = 0; i < 100; i++) {
    const ok = await runCommand(ns === null ? process.execPath : 'ip', ns === null ? ['-e', probe] : ['netns', 'exec', ns, process.execPath, '-e', probe]).then(() => true, () => false);
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`nothing listens on ${host}:${port}`);
}

interface Result {
  requests: number;
  rps: number;
  p50: number;
  p99: number;
  /** CPU time the proxy spent per request, user plus system, in microseconds. */
  cpuUs: number;
}

/** CPU time of a process so far, in microseconds (utime + stime of /proc/PID/stat, in ticks of 10 ms). */
function processCpuUs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

/**
 * The gateway's CPU: its listeners' process, and this one, which holds its devices and answers the
 * listeners (audits, secrets) as the service would, and does nothing else while a load client runs.
 */
const gatewayCpuUs = () => {
  const u = process.cpuUsage();
  return processCpuUs(gateway!.listenerPid!) + u.user + u.system;
};

async function load(ns: string, endpoint: string, opts: { connect?: string; caFile: string; workers?: number; proxyCpuUs: () => number; path?: string }): Promise<Result> {
  const args = { endpoint, connect: opts.connect, servername: 'bench.test', caFile: opts.caFile, workers: opts.workers ?? WORKERS, seconds: SECONDS, path: opts.path };
  const cpuBefore = opts.proxyCpuUs();
  const out = await runCommand('ip', ['netns', 'exec', ns, process.execPath, join(REPO_ROOT, 'dist/bench/egress-client.js'), JSON.stringify(args)]);
  const r = JSON.parse(out.trim().split('\n').pop()!) as Omit<Result, 'cpuUs'>;
  return { ...r, cpuUs: (opts.proxyCpuUs() - cpuBefore) / Math.max(1, r.requests) };
}

async function cleanupNetwork(): Promise<void> {
  for (const ns of [NS_GATEWAY, NS_BASELINE]) await runCommand('ip', ['netns', 'del', ns]).catch(() => undefined);
  for (const dev of [TAP, 'vbpx0']) await runCommand('ip', ['link', 'del', dev]).catch(() => undefined);
  await runCommand('nft', ['delete', 'table', 'inet', `vessel_${INSTANCE}`]).catch(() => undefined);
}

await cleanupNetwork();
let gateway: Gateway | null = null;
try {
  // Upstream, with its own CA, reachable on loopback (for the gateway) and the baseline link.
  const upstreamCaDir = join(dir, 'upstream-ca');
  mkdirSync(upstreamCaDir);
  const upPort = await freePort();
  const upstream = await start(process.execPath, [join(REPO_ROOT, 'dist/bench/egress-upstream.js'), upstreamCaDir, String(upPort)], /ready/);
  const upstreamCa = join(upstreamCaDir, 'ca.crt');

  // The gateway (its devices in this process, its listeners in their own), over a veth that looks like a runtime TAP.
  const runtimeId = randomUUID();
  await ip([
    `netns add ${NS_GATEWAY}`,
    `link add ${TAP} type veth peer name eth0 netns ${NS_GATEWAY}`,
    `link set dev ${TAP} alias ${INSTANCE}:${runtimeId}`,
    `addr add ${GUEST_NETWORK.gateway}/32 dev ${TAP}`,
    `link set ${TAP} up`,
    `route replace ${identityAddress(slotOfTap(TAP)!)}/32 dev ${TAP} src ${GUEST_NETWORK.gateway}`,
  ]);
  await clientSide(NS_GATEWAY, `${GUEST_NETWORK.address}/${GUEST_NETWORK.prefixLength}`, GUEST_NETWORK.gateway);
  mkdirSync(`/etc/netns/${NS_GATEWAY}`, { recursive: true });
  writeFileSync(`/etc/netns/${NS_GATEWAY}/resolv.conf`, `nameserver ${GUEST_NETWORK.gateway}\n`);
  const overrides = join(dir, 'overrides');
  writeFileSync(overrides, 'bench.test 127.0.0.1\n');
  const ca = await CertificateAuthority.loadOrCreate(dir);
  const silent = { info() {}, warn() {}, error() {} };
  gateway = new Gateway({
    instance: INSTANCE, ca, proxyPort: await freePort(), dnsPort: await freePort(), allowCidrs: ['127.0.0.0/8'],
    dnsOverridesFile: overrides, extraCaFile: upstreamCa, injectPlainHttp: false, icmpAuditSecs: 0,
    ingress: { host: '127.0.0.1', port: await freePort(), domain: 'localhost' }, log: silent,
  });
  let audits = 0;
  gateway.connect({
    // A rule whose secret is gone injects nothing, and nothing is redacted: interception alone.
    revealSecret: async (_tenant, secretId) => (secretId === 'absent' ? null : { value: 'bench-secret', cacheTtlSecs: 300 }),
    audit: () => void audits++,
    activity: () => undefined,
    ingressTarget: async () => null,
  });
  await gateway.start();
  const subject: EgressSubject = { runtimeId, tenantId: 'bench', policy: { enabled: true, allowed_hosts: ['bench.test'] }, rules: [] };
  await gateway.restore([subject]);
  // The guest-side name: what the gateway's DNS shows the client for bench.test.
  const shown = (await runCommand('ip', ['netns', 'exec', NS_GATEWAY, 'getent', 'hosts', 'bench.test'])).trim().split(/\s+/)[0]!;
  const viaGateway = `${shown}:${upPort}`;

  const bothCas = join(dir, 'upstream-and-vessel.pem');
  writeFileSync(bothCas, readFileSync(upstreamCa, 'utf8') + ca.certPem);
  const rounds = async (runs: Record<string, () => Promise<Result>>): Promise<Record<string, Result>> => {
    const seen: Record<string, Result[]> = {};
    for (let i = 0; i < ROUNDS; i++) for (const [name, run] of Object.entries(runs)) (seen[name] ??= []).push(await run());
    const median = (xs: number[]) => xs.sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    const medianOf = (rs: Result[]): Result => ({
      requests: median(rs.map((r) => r.requests)), rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)), cpuUs: median(rs.map((r) => r.cpuUs)),
    });
    return Object.fromEntries(Object.entries(seen).map(([name, rs]) => [name, medianOf(rs)]));
  };
  const row = (name: string, r: Result, base?: Result) =>
    `${name.padEnd(46)} ${r.rps.toFixed(0).padStart(7)} req/s   p50 ${r.p50.toFixed(2).padStart(6)} ms   p99 ${r.p99.toFixed(2).padStart(6)} ms` +
    (base === undefined ? '' : `   ${(r.rps / base.rps).toFixed(2)}× throughput`);
  const cpu = (name: string, r: Result, base: Result) =>
    `  proxy CPU per request: ${name} ${base.cpuUs.toFixed(1)} µs, vessel ${r.cpuUs.toFixed(1)} µs (${(r.cpuUs / base.cpuUs).toFixed(2)}×)`;
  if (baselines) {
    // The baselines' namespace, with squid and mitmproxy on the host end of its link.
    await ip([`netns add ${NS_BASELINE}`, `link add vbpx0 type veth peer name eth0 netns ${NS_BASELINE}`, `addr add ${BASELINE_HOST}/30 dev vbpx0`, `link set vbpx0 up`]);
    await clientSide(NS_BASELINE, '10.199.0.2/30', BASELINE_HOST);
    const squidPort = await freePort();
    writeFileSync(join(dir, 'squid.conf'), [
      `http_port ${BASELINE_HOST}:${squidPort}`, 'http_access allow all', 'cache deny all', 'access_log none', 'cache_log /dev/null',
      `pid_filename ${join(dir, 'squid.pid')}`, `coredump_dir ${dir}`, 'shutdown_lifetime 0 seconds', 'workers 1', '',
    ].join('\n'));
    const squidProcess = await start('squid', ['-N', '-f', join(dir, 'squid.conf')], null);
    const mitmPort = await freePort();
    const mitmConf = join(dir, 'mitmproxy');
    const mitmProcess = await start('mitmdump', [
      '-q', '--listen-host', BASELINE_HOST, '-p', String(mitmPort), '--set', `confdir=${mitmConf}`,
      '--set', `ssl_verify_upstream_trusted_ca=${upstreamCa}`, '--modify-headers', '/~q/X-Api-Key/bench-secret',
    ], null);
    await waitForPort(null, BASELINE_HOST, squidPort);
    await waitForPort(null, BASELINE_HOST, mitmPort);
    const mitmCa = join(mitmConf, 'mitmproxy-ca-cert.pem');

    // workers = 1 measures latency without queueing; the default measures throughput under load.
    const squidCpuUs = () => processCpuUs(squidProcess.pid!);
    const mitmCpuUs = () => processCpuUs(mitmProcess.pid!);
    const direct = (workers?: number) => load(NS_BASELINE, `${BASELINE_HOST}:${upPort}`, { caFile: upstreamCa, workers, proxyCpuUs: () => 0 });
    const squid = (workers?: number) => load(NS_BASELINE, `127.0.0.1:${upPort}`, { connect: `${BASELINE_HOST}:${squidPort}`, caFile: upstreamCa, workers, proxyCpuUs: squidCpuUs });
    const mitm = (workers?: number) => load(NS_BASELINE, `127.0.0.1:${upPort}`, { connect: `${BASELINE_HOST}:${mitmPort}`, caFile: mitmCa, workers, proxyCpuUs: mitmCpuUs });
    const vesselSplice = (workers?: number) => load(NS_GATEWAY, viaGateway, { caFile: upstreamCa, workers, proxyCpuUs: gatewayCpuUs });
    const vesselInject = (workers?: number) => load(NS_GATEWAY, viaGateway, { caFile: bothCas, workers, proxyCpuUs: gatewayCpuUs });

    // Warm-up, then ROUNDS rounds that alternate the paths compared, so that drift on a busy
    // 2-core machine (client, upstream and proxy share it) hits each alike; medians are reported.
    await direct();
    await squid();
    await vesselSplice();
    const passthrough = await rounds({ d: () => direct(), s: () => squid(), vs: () => vesselSplice(), d1: () => direct(1), s1: () => squid(1), vs1: () => vesselSplice(1) });
    const { d, s, vs, d1, s1, vs1 } = passthrough as Record<'d' | 's' | 'vs' | 'd1' | 's1' | 'vs1', Result>;
    const added = (r: Result, base = d) => `added p50 ${(r.p50 - base.p50).toFixed(2)} ms, p99 ${(r.p99 - base.p99).toFixed(2)} ms over direct`;
    await gateway.update({
      ...subject,
      rules: [{ id: 'bench-rule', tenantId: 'bench', runtimeId, secretId: 'bench-secret', hostPattern: 'bench.test', pathPattern: '/**', injection: { headerName: 'X-Api-Key' }, createdAt: '' }],
    });
    await mitm();
    await vesselInject();
    const interception = await rounds({ m: () => mitm(), vi: () => vesselInject(), m1: () => mitm(1), vi1: () => vesselInject(1) });
    const { m, vi, m1, vi1 } = interception as Record<'m' | 'vi' | 'm1' | 'vi1', Result>;

    console.log(`HTTPS keep-alive GETs, ${WORKERS} connections (latency also with 1), ${SECONDS} s per run, median of ${ROUNDS} alternating rounds, clients in network namespaces`);
    console.log(row('direct (no proxy)', d));
    console.log(row('squid CONNECT passthrough', s));
    console.log(row('vessel passthrough (spliced)', vs, s) + ' vs squid');
    console.log(`  under load: squid ${added(s)}; vessel ${added(vs)}`);
    console.log(`  one connection: squid ${added(s1, d1)}; vessel ${added(vs1, d1)}`);
    console.log(cpu('squid', vs, s));
    console.log(row('mitmproxy intercept + header', m));
    console.log(row('vessel intercept + injection', vi, m) + ' vs mitmproxy');
    console.log(`  under load: mitmproxy ${added(m)}; vessel ${added(vi)}`);
    console.log(`  one connection: mitmproxy ${added(m1, d1)}; vessel ${added(vi1, d1)}`);
    console.log(cpu('mitmproxy', vi, m));
  }
  // Body redaction's cost: interception of a host with a rule whose secret is injected (every
  // response body scanned and masked as it streams) against the same rule with its secret gone
  // (nothing injected, nothing scanned), alternating, for a tiny body and a 64 KiB one.
  const withRule = (secretId: string) => gateway!.update({
    ...subject,
    rules: [{ id: 'bench-rule', tenantId: 'bench', runtimeId, secretId, hostPattern: 'bench.test', pathPattern: '/**', injection: { headerName: 'X-Api-Key' }, createdAt: '' }],
  });
  const intercept = (secretId: string, bytes: number, workers?: number) => async () => {
    await withRule(secretId);
    return load(NS_GATEWAY, viaGateway, { caFile: bothCas, workers, proxyCpuUs: gatewayCpuUs, path: bytes === 0 ? '/bench' : `/bench?bytes=${bytes}` });
  };
  const redactionRuns: Record<string, () => Promise<Result>> = {};
  for (const bytes of REDACTION_BODIES) {
    redactionRuns[`plain ${bytes}`] = intercept('absent', bytes);
    redactionRuns[`redacted ${bytes}`] = intercept('bench-secret', bytes);
  }
  redactionRuns['plain 0 x1'] = intercept('absent', 0, 1);
  redactionRuns['redacted 0 x1'] = intercept('bench-secret', 0, 1);
  await intercept('bench-secret', 0)();
  const red = await rounds(redactionRuns);
  console.log(`Body redaction: HTTPS keep-alive GETs through the gateway's interception, ${WORKERS} connections (latency also with 1), ${SECONDS} s per run, median of ${ROUNDS} alternating rounds`);
  for (const bytes of REDACTION_BODIES) {
    const plain = red[`plain ${bytes}`]!;
    const redacted = red[`redacted ${bytes}`]!;
    const size = bytes === 0 ? '3 B body' : `${bytes / 1024} KiB body`;
    console.log(row(`intercept, nothing injected, ${size}`, plain));
    console.log(row(`intercept + injection + redaction, ${size}`, redacted, plain) + ' vs without');
    console.log(`  gateway CPU per request: without ${plain.cpuUs.toFixed(1)} µs, with ${redacted.cpuUs.toFixed(1)} µs (${(redacted.cpuUs / plain.cpuUs).toFixed(2)}×)`);
  }
  const p1 = red['plain 0 x1']!;
  const r1 = red['redacted 0 x1']!;
  console.log(`  one connection, 3 B body: p50 ${p1.p50.toFixed(2)} → ${r1.p50.toFixed(2)} ms, p99 ${p1.p99.toFixed(2)} → ${r1.p99.toFixed(2)} ms`);
  upstream.kill('SIGTERM');
  const seen = await new Promise<string>((r) => upstream.stdout!.on('data', (x) => r(String(x))));
  console.log(`upstream saw ${seen.trim()}; gateway wrote ${audits} audits`);
} finally {
  await gateway?.close();
  for (const c of children) c.kill('SIGKILL');
  await cleanupNetwork();
  rmSync(`/etc/netns/${NS_GATEWAY}`, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
}
