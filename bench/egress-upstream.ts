/**
 * The upstream of bench/egress: HTTPS with keep-alive, certificates from a test CA, answering a
 * small body (`/bench`), or `/bench?bytes=N`: N bytes of JSON-ish text, without the secret. It records whether the injected header arrived, and prints it on SIGTERM.
 *
 * argv: caDir port
 */
import { createServer } from 'node:https';
import { CertificateAuthority } from '../src/net/certificate-authority.js';

const SAMPLE = Buffer.from('{"headers": {"Accept": "*/*", "User-Agent": "bench/1.0", "X-Request-Id": "0123456789abcdef"}, "origin": "10.0.0.1"}\n');
const bodies = new Map<number, Buffer>();
/** N bytes of text like an API's JSON answers, made once per size. */
function body(n: number): Buffer {
  let b = bodies.get(n);
  if (b === undefined) bodies.set(n, (b = Buffer.alloc(n, SAMPLE)));
  return b;
}

const ca = await CertificateAuthority.loadOrCreate(process.argv[2]!);
const seen = { requests: 0, injected: 0 };
const server = createServer(
  { SNICallback: (name, cb) => void ca.contextFor(name).then((ctx) => cb(null, ctx), cb), keepAliveTimeout: 60_000 },
  (req, res) => {
    seen.requests++;
    if (req.headers['x-api-key'] === 'bench-secret') seen.injected++;
    const bytes = Number(/[?&]bytes=(\d+)/.exec(req.url ?? '')?.[1] ?? 0);
    if (bytes === 0) {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '3' });
      return void res.end('ok\n');
    }
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(bytes) });
    res.end(body(bytes));
  },
);
server.listen(Number(process.argv[3]), '0.0.0.0', () => process.stdout.write('ready\n'));
process.on('SIGTERM', () => {
  process.stdout.write(JSON.stringify(seen) + '\n');
  process.exit(0);
});
