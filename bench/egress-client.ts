/**
 * The load client of bench/egress, run inside a network namespace: `workers` keep-alive HTTPS
 * connections, each sending GETs back to back for `seconds`, optionally through an HTTP CONNECT
 * proxy. A minimal HTTP/1.1 client, the same for every path measured, prints one JSON line.
 *
 * argv: JSON { endpoint: "host:port", connect?: "host:port", servername, caFile, workers, seconds, path? (default /bench) }
 */
import { readFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';

interface Args {
  endpoint: string;
  connect?: string;
  servername: string;
  caFile: string;
  workers: number;
  seconds: number;
  path?: string;
}

const args = JSON.parse(process.argv[2]!) as Args;
const ca = readFileSync(args.caFile);

function split(hostPort: string): [string, number] {
  const i = hostPort.lastIndexOf(':');
  return [hostPort.slice(0, i), Number(hostPort.slice(i + 1))];
}

/** Reads from the socket until `done(buffer)` returns a length consumed, and resolves with it. */
function readUntil(socket: Socket | TLSSocket, state: { buf: Buffer }, done: (b: Buffer) => number | null): Promise<void> {
  return new Promise((resolve, reject) => {
    const check = () => {
      const n = done(state.buf);
      if (n === null) return false;
      state.buf = state.buf.subarray(n);
      socket.off('data', onData);
      socket.off('error', reject);
      socket.off('close', onClose);
      resolve();
      return true;
    };
    const onData = (d: Buffer) => {
      state.buf = state.buf.length === 0 ? d : Buffer.concat([state.buf, d]);
      check();
    };
    const onClose = () => reject(new Error('connection closed'));
    if (check()) return;
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', onClose);
  });
}

function responseLength(b: Buffer): number | null {
  const end = b.indexOf('\r\n\r\n');
  if (end === -1) return null;
  const head = b.subarray(0, end).toString('latin1');
  if (!head.startsWith('HTTP/1.1 200')) throw new Error(`unexpected response: ${head.split('\r\n')[0]}`);
  const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
  const total = end + 4 + Number(m?.[1] ?? 0);
  return b.length >= total ? total : null;
}

async function open(): Promise<TLSSocket> {
  const [host, port] = split(args.connect ?? args.endpoint);
  const tcp = connect({ host, port, noDelay: true });
  await new Promise<void>((r, j) => tcp.once('connect', r).once('error', j));
  if (args.connect !== undefined) {
    tcp.write(`CONNECT ${args.endpoint} HTTP/1.1\r\nHost: ${args.endpoint}\r\n\r\n`);
    const state = { buf: Buffer.alloc(0) };
    await readUntil(tcp, state, (b) => {
      const end = b.indexOf('\r\n\r\n');
      if (end === -1) return null;
      if (!/^HTTP\/1\.[01] 200/.test(b.toString('latin1'))) throw new Error(`CONNECT refused: ${b.toString('latin1', 0, end)}`);
      return end + 4;
    });
  }
  const tls = tlsConnect({ socket: tcp, servername: args.servername, ca, ALPNProtocols: ['http/1.1'] });
  await new Promise<void>((r, j) => tls.once('secureConnect', r).once('error', j));
  return tls;
}

const request = Buffer.from(`GET ${args.path ?? '/bench'} HTTP/1.1\r\nHost: ${args.servername}\r\nX-Api-Key: from-the-client\r\n\r\n`);
const latencies: number[] = [];
const deadline = Date.now() + args.seconds * 1000;

async function worker(): Promise<void> {
  const socket = await open();
  const state = { buf: Buffer.alloc(0) };
  while (Date.now() < deadline) {
    const t = process.hrtime.bigint();
    socket.write(request);
    await readUntil(socket, state, responseLength);
    latencies.push(Number(process.hrtime.bigint() - t) / 1e6);
  }
  socket.destroy();
}

await Promise.all(Array.from({ length: args.workers }, worker));
latencies.sort((a, b) => a - b);
const q = (p: number) => latencies[Math.min(latencies.length - 1, Math.floor(p * latencies.length))] ?? NaN;
process.stdout.write(JSON.stringify({ requests: latencies.length, rps: latencies.length / args.seconds, p50: q(0.5), p99: q(0.99) }) + '\n');
