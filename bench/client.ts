/**
 * What the SDK and the CLI cost over raw HTTP, in one invocation against one real VM:
 * - exec of /bin/true: the SDK's `rt.exec` against a bare `fetch` of the same request;
 * - `vessel exec NAME -- /bin/true` against `curl` sending the same request, each a new process
 *   (what a shell script pays per command), with `node -e 0` as the floor of any Node program;
 * - a 32 MiB file written and read through `rt.files` against node:http.
 * Each round runs every variant once, in turn, so a VM's drift touches all of them alike.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { get, request } from 'node:http';
import { promisify } from 'node:util';
import { Vessel } from '../client/index.js';
import { CLI } from '../test/support/cli.js';
import { Service } from '../test/support/service.js';

const EXECS = Number(process.env.BENCH_EXECS ?? 40);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 10);
const PROCESS_ROUNDS = Number(process.env.BENCH_PROCESS_ROUNDS ?? 15);
const FILE_MIB = Number(process.env.BENCH_FILE_MIB ?? 32);
const FILE_ROUNDS = Number(process.env.BENCH_FILE_ROUNDS ?? 4);

const run = promisify(execFile);
const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor((p / 100) * xs.length))]!;
const ms = (x: number) => `${x.toFixed(1)} ms`;
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}×`;

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t = performance.now();
  await fn();
  return performance.now() - t;
}

/** A body sent or received through node:http, as a program without the SDK would. */
function rawPut(url: string, headers: Record<string, string>, body: Buffer): Promise<void> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: 'PUT', headers: { ...headers, 'content-type': 'application/octet-stream', 'content-length': body.length } }, (res) => {
      res.resume();
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`PUT ${res.statusCode}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

function rawGet(url: string, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    get(url, { headers }, (res) => {
      let n = 0;
      res.on('data', (c: Buffer) => (n += c.length));
      res.on('end', () => (res.statusCode === 200 ? resolve(n) : reject(new Error(`GET ${res.statusCode}`))));
    }).on('error', reject);
  });
}

async function readAll(stream: ReadableStream<Uint8Array>): Promise<number> {
  let n = 0;
  for await (const chunk of stream as unknown as AsyncIterable<Uint8Array>) n += chunk.length;
  return n;
}

const svc = new Service();
await svc.start();
try {
  const vessel = new Vessel({ url: svc.url, token: svc.token });
  const rt = await vessel.runtimes.create({ display_name: 'bench-client' });
  const execUrl = `${svc.url}/v1/runtimes/bench-client/exec`;
  const execBody = JSON.stringify({ command: '/bin/true', args: ['--'] });
  const auth = { authorization: `Bearer ${svc.token}` };

  const fetchExec = async () => {
    const res = await fetch(execUrl, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: execBody });
    const body = (await res.json()) as { data?: { exit_code: number } };
    if (res.status !== 200 || body.data?.exit_code !== 0) throw new Error(`raw exec: ${res.status} ${JSON.stringify(body)}`);
  };
  const sdkExec = async () => {
    const r = await rt.exec({ command: '/bin/true', args: ['--'] });
    if (r.exit_code !== 0) throw new Error(`SDK exec exited ${r.exit_code}`);
  };
  const raw: number[] = [];
  const sdk: number[] = [];
  for (let i = 0; i < EXECS + WARMUP; i++) {
    const a = await timed(fetchExec);
    const b = await timed(sdkExec);
    if (i < WARMUP) continue;
    raw.push(a);
    sdk.push(b);
  }

  const env = { ...process.env, VESSEL_URL: svc.url, VESSEL_TOKEN: svc.token };
  const cliExec = () => run(process.execPath, [CLI, 'exec', 'bench-client', '--', '/bin/true'], { env });
  const curlExec = () => run('curl', ['-sf', '-X', 'POST', '-H', `authorization: Bearer ${svc.token}`, '-H', 'content-type: application/json', '-d', execBody, execUrl]);
  const nodeFloor = () => run(process.execPath, ['-e', '0']);
  const cli: number[] = [];
  const curl: number[] = [];
  const node: number[] = [];
  await cliExec(); // the first run of the CLI pays the disk cache
  for (let i = 0; i < PROCESS_ROUNDS; i++) {
    cli.push(await timed(cliExec));
    curl.push(await timed(curlExec));
    node.push(await timed(nodeFloor));
  }

  const data = randomBytes(FILE_MIB * 1024 * 1024);
  const fileUrl = `${svc.url}/v1/runtimes/bench-client/files?path=`;
  const rate = (t: number) => FILE_MIB / (t / 1000);
  const rawW: number[] = [];
  const rawR: number[] = [];
  const sdkW: number[] = [];
  const sdkR: number[] = [];
  for (let i = 0; i < FILE_ROUNDS; i++) {
    rawW.push(rate(await timed(() => rawPut(`${fileUrl}/root/raw.bin`, auth, data))));
    rawR.push(rate(await timed(async () => { if ((await rawGet(`${fileUrl}/root/raw.bin`, auth)) !== data.length) throw new Error('raw read short'); })));
    sdkW.push(rate(await timed(() => rt.files.write('/root/sdk.bin', data))));
    sdkR.push(rate(await timed(async () => { if ((await readAll(await rt.files.read('/root/sdk.bin'))) !== data.length) throw new Error('SDK read short'); })));
  }
  await rt.delete();

  console.log(`exec /bin/true in-process (n=${EXECS}, interleaved):`);
  console.log(`  fetch: p50 ${ms(pct(raw, 50))}, p99 ${ms(pct(raw, 99))}`);
  console.log(`  SDK:   p50 ${ms(pct(sdk, 50))}, p99 ${ms(pct(sdk, 99))}   ratio p50 ${ratio(pct(sdk, 50), pct(raw, 50))}`);
  console.log(`exec /bin/true as a new process each (n=${PROCESS_ROUNDS}, interleaved):`);
  console.log(`  curl:        p50 ${ms(pct(curl, 50))}`);
  console.log(`  vessel exec: p50 ${ms(pct(cli, 50))}   ratio ${ratio(pct(cli, 50), pct(curl, 50))}`);
  console.log(`  node -e 0:   p50 ${ms(pct(node, 50))}   (the floor of any Node program)`);
  console.log(`files ${FILE_MIB} MiB, median of ${FILE_ROUNDS} (MiB/s):`);
  console.log(`  node:http write ${pct(rawW, 50).toFixed(1)}, read ${pct(rawR, 50).toFixed(1)}`);
  console.log(`  SDK       write ${pct(sdkW, 50).toFixed(1)}, read ${pct(sdkR, 50).toFixed(1)}   ratio ${ratio(pct(sdkW, 50), pct(rawW, 50))} / ${ratio(pct(sdkR, 50), pct(rawR, 50))}`);
} finally {
  await svc.destroy();
}
