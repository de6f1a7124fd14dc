/**
 * The upstream of bench/egress: HTTPS with keep-alive, certificates from a test CA, answering a
 * small body. It records whether the injected header arrived, and prints it on SIGTERM.
 *
 * argv: caDir port
 */
import { createServer } from 'node:https';
import { CertificateAuthority } from '../src/net/certificate-authority.js';

const ca = await CertificateAuthority.loadOrCreate(process.argv[2]!);
const seen = { requests: 0, injected: 0 };
const server = createServer(
  { SNICallback: (name, cb) => void ca.contextFor(name).then((ctx) => cb(null, ctx), cb), keepAliveTimeout: 60_000 },
  (req, res) => {
    seen.requests++;
    if (req.headers['x-api-key'] === 'bench-secret') seen.injected++;
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '3' });
    res.end('ok\n');
  },
);
server.listen(Number(process.argv[3]), '0.0.0.0', () => process.stdout.write('ready\n'));
process.on('SIGTERM', () => {
  process.stdout.write(JSON.stringify(seen) + '\n');
  process.exit(0);
});
