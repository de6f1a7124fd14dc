/**
 * The TemplateBuilder the API's process runs (src/templates/template-builder.ts), with the real
 * tools: an uploaded OCI archive and an image on a loopback registry become a root disk, which
 * goes to the VM host as its non-zero chunks; registries on blocked addresses are refused unless
 * the operator opened them. Needs skopeo, docker-registry, tini (tini-static), busybox-static,
 * gcc and e2fsprogs (see docs/templates.md).
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { closeSync, createReadStream, existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import type { BuildReporter } from '../../src/core/build-log.js';
import { VesselError } from '../../src/core/errors.js';
import type { DiskChunk, TemplateDisks } from '../../src/core/ports.js';
import { BuildFailure } from '../../src/core/templates.js';
import { type GuestKit } from '../../src/templates/guest-kit.js';
import { RegistryPolicy, parseRegistryList, registryOf } from '../../src/templates/registry-policy.js';
import { ImageTemplateBuilder, diskChunks } from '../../src/templates/template-builder.js';
import { GUEST_RECIPE_DIR } from '../../src/vm/guest-image.js';
import { buildAgent } from '../support/agent-harness.js';
import { LocalRegistry, writeOciLayout } from '../support/oci-layout.js';
import { tarOf } from '../support/tar-stream.js';

const DISK_BYTES = 256 * 1024 * 1024;
let root: string;
let registry: LocalRegistry;
let kit: GuestKit;
let source: string;

before(async () => {
  root = mkdtempSync(join(tmpdir(), 'vessel-template-builder-'));
  registry = await LocalRegistry.start(join(root, 'registry'));
  const agent = buildAgent();
  if ('skip' in agent) throw new Error(agent.skip);
  kit = {
    busybox: existsSync('/usr/bin/busybox') ? '/usr/bin/busybox' : '/bin/busybox',
    tini: '/usr/bin/tini-static',
    agent: agent.binary,
    vesselInit: readFileSync(join(GUEST_RECIPE_DIR, 'vessel-init'), 'utf8'),
  };
  source = join(root, 'source');
  writeOciLayout(source, {
    layers: [tarOf([{ path: 'etc/os-release', body: 'ID=buildertest\n' }, { path: 'app/hello.txt', body: 'hello\n' }], { gzip: true })],
    config: { Env: ['PATH=/usr/bin:/bin', 'GREETING=hi'], WorkingDir: '/app', User: '1000', Cmd: ['/app/run'] },
  });
});

after(() => {
  registry?.stop();
  rmSync(root, { recursive: true, force: true });
});

/** The VM host's side, in memory: each disk as it was sent, chunk by chunk. */
class RecordedDisks implements TemplateDisks {
  readonly disks = new Map<string, { sizeBytes: number; chunks: DiskChunk[] }>();
  readonly deleted: string[] = [];
  async importTemplateDisk(templateId: string, sizeBytes: number, chunks: AsyncIterable<DiskChunk>): Promise<void> {
    const got: DiskChunk[] = [];
    for await (const c of chunks) got.push(c);
    this.disks.set(templateId, { sizeBytes, chunks: got });
  }
  async deleteTemplateDisk(templateId: string): Promise<void> {
    this.deleted.push(templateId);
  }
  /** The disk put back together as a sparse file, to read with debugfs. */
  write(templateId: string, file: string): void {
    const { sizeBytes, chunks } = this.disks.get(templateId)!;
    writeFileSync(file, '');
    execFileSync('truncate', ['-s', String(sizeBytes), file]);
    const fd = openSync(file, 'r+');
    for (const c of chunks) writeSync(fd, c.data, 0, c.data.length, c.offset);
    closeSync(fd);
  }
}

class Log implements BuildReporter {
  readonly steps: string[] = [];
  text = '';
  step(name: string): void {
    this.steps.push(name);
  }
  output(text: string): void {
    this.text += text;
  }
}

const debugfs = (img: string, request: string): string => execFileSync('debugfs', ['-R', request, img], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });

let n = 0;
function builderIn(disks: TemplateDisks, allowed: string[] = []): { builder: ImageTemplateBuilder; dir: string } {
  const dir = join(root, `builds-${++n}`);
  return { builder: new ImageTemplateBuilder({ dir, kit, registries: new RegistryPolicy(allowed), disks, diskBytes: DISK_BYTES }), dir };
}

test('an uploaded OCI archive is built into a root disk, handed over as its non-zero chunks in order, and the build keeps nothing', async () => {
  const archive = join(root, 'image.oci.tar');
  execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', `oci:${source}:image`, `oci-archive:${archive}`]);
  const disks = new RecordedDisks();
  const { builder, dir } = builderIn(disks);
  const id = randomUUID();
  const size = await builder.receiveArchive(id, createReadStream(archive), 1024 ** 3);
  assert.equal(size, statSync(archive).size);
  const log = new Log();
  const built = await builder.build(id, { kind: 'archive' }, log, new AbortController().signal);
  assert.deepEqual(log.steps, ['read the image archive', 'apply 1 layer', 'add the Vessel guest', 'write the root disk', 'hand the disk to the VM host']);
  assert.deepEqual(built, { config: { env: { PATH: '/usr/bin:/bin', GREETING: 'hi' }, workdir: '/app', user: '1000', entrypoint: null, cmd: ['/app/run'] }, diskBytes: DISK_BYTES });
  const sent = disks.disks.get(id)!;
  assert.equal(sent.sizeBytes, DISK_BYTES);
  let next = 0;
  for (const c of sent.chunks) {
    assert.ok(c.offset >= next && c.offset % 4096 === 0 && c.data.length <= 128 * 1024, 'in order, block-aligned, small enough for the link');
    assert.ok(!c.data.subarray(0, 4096).equals(Buffer.alloc(4096)), 'no chunk begins with a zero block');
    next = c.offset + c.data.length;
  }
  assert.ok(sent.chunks.reduce((s, c) => s + c.data.length, 0) < DISK_BYTES / 4, 'a sparse disk sends far less than its size');
  const img = join(root, 'reassembled.img');
  disks.write(id, img);
  assert.equal(debugfs(img, 'cat /app/hello.txt'), 'hello\n');
  assert.match(debugfs(img, 'stat /.vessel/bin/vessel-agent'), /Type: regular/);
  assert.deepEqual(readdirSync(dir), [], "the build's files are gone once the disk is handed over");
  await builder.discard(id);
  assert.deepEqual(disks.deleted, [id], "a discard removes the VM host's disk too");
});

test('an archive over the limit, or empty, is refused as it arrives', async () => {
  const { builder } = builderIn(new RecordedDisks());
  await assert.rejects(builder.receiveArchive(randomUUID(), Readable.from([Buffer.alloc(1000), Buffer.alloc(1000)]), 1500), (err: unknown) => err instanceof VesselError && err.httpStatus === 413);
  await assert.rejects(builder.receiveArchive(randomUUID(), Readable.from([]), 1500), /empty/);
});

test('a registry on loopback is refused unless the operator opened it; opened, it is pulled over plain HTTP', async () => {
  execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', '--dest-tls-verify=false', `oci:${source}:image`, `docker://${registry.host}/team/app:1`]);
  const reference = `${registry.host}/team/app:1`;
  const closed = builderIn(new RecordedDisks());
  await assert.rejects(closed.builder.build(randomUUID(), { kind: 'image', image: reference, credentials: null }, new Log(), new AbortController().signal), (err: unknown) => err instanceof VesselError && err.code === 'invalid_argument' && /resolves to 127\.0\.0\.1.*VESSEL_TEMPLATE_REGISTRIES_ALLOWED/.test(err.message));

  const disks = new RecordedDisks();
  const open = builderIn(disks, [registry.host]);
  const id = randomUUID();
  const log = new Log();
  const built = await open.builder.build(id, { kind: 'image', image: reference, credentials: null }, log, new AbortController().signal);
  assert.equal(log.steps[0], `check the registry of ${reference}`);
  assert.equal(log.steps[1], `pull ${reference}`);
  assert.equal(built.config.env.GREETING, 'hi');
  assert.ok(disks.disks.has(id));
});

test('a build aborted before it begins is cancelled, and hands nothing over', async () => {
  const disks = new RecordedDisks();
  const { builder, dir } = builderIn(disks, [registry.host]);
  const abort = new AbortController();
  abort.abort();
  await assert.rejects(builder.build(randomUUID(), { kind: 'image', image: `${registry.host}/team/app:1`, credentials: null }, new Log(), abort.signal), (err: unknown) => err instanceof BuildFailure && /cancelled/.test(err.message));
  assert.equal(disks.disks.size, 0);
  assert.deepEqual(readdirSync(dir), []);
});

test("a registry's address is held to the gateway's blocked ranges", async () => {
  const resolving = (addresses: Record<string, string[]>) => async (host: string) => addresses[host] ?? [];
  const hostOwn = () => ['203.0.114.9'];
  const policy = new RegistryPolicy(['mirror.internal:5000'], resolving({ 'ghcr.io': ['140.82.1.1'], 'evil.example': ['140.82.1.2', '169.254.169.254'], 'me.example': ['203.0.114.9'], 'mirror.internal': ['10.0.0.5'], 'registry-1.docker.io': ['3.1.1.1'], 'v6.example': ['::ffff:127.0.0.1'] }), hostOwn);
  assert.deepEqual(await policy.check('ghcr.io/org/app:1'), { registry: 'ghcr.io', insecure: false });
  assert.deepEqual(await policy.check('debian:12'), { registry: 'registry-1.docker.io', insecure: false });
  assert.deepEqual(await policy.check('mirror.internal:5000/app'), { registry: 'mirror.internal:5000', insecure: false }, 'opened by the operator; not loopback, so TLS');
  for (const ref of ['evil.example/app', 'me.example/app', 'v6.example/app', '127.0.0.1:5000/app', 'localhost/app', '[::1]:5000/app', 'mirror.internal:5001/app', '10.1.2.3/app']) {
    await assert.rejects(policy.check(ref), (err: unknown) => err instanceof VesselError && err.code === 'invalid_argument', ref);
  }
  assert.equal(registryOf('library/debian'), 'registry-1.docker.io');
  assert.equal(registryOf('docker.io/library/debian'), 'registry-1.docker.io');
  assert.equal(registryOf('LOCALHOST:5000/a'), 'localhost:5000');
  assert.deepEqual(parseRegistryList(' 127.0.0.1:5000, Mirror.Internal '), ['127.0.0.1:5000', 'mirror.internal']);
  assert.throws(() => parseRegistryList('http://x'), /not a registry/);
});

test('diskChunks sends runs of non-zero blocks with their offsets, and nothing of the holes', async () => {
  const file = join(root, 'chunks.img');
  mkdirSync(root, { recursive: true });
  const data = Buffer.alloc(64 * 4096 + 100);
  data.fill(1, 0, 4096);
  data.fill(2, 3 * 4096, 3 * 4096 + 10);
  data.fill(3, 10 * 4096, 60 * 4096); // 50 blocks: more than one chunk
  data.fill(4, 64 * 4096, 64 * 4096 + 100); // a partial block at the end
  writeFileSync(file, data);
  const chunks: DiskChunk[] = [];
  for await (const c of diskChunks(file)) chunks.push(c);
  assert.deepEqual(chunks.map((c) => [c.offset, c.data.length]), [[0, 4096], [3 * 4096, 4096], [10 * 4096, 32 * 4096], [42 * 4096, 18 * 4096], [64 * 4096, 100]]);
  const back = Buffer.alloc(data.length);
  for (const c of chunks) c.data.copy(back, c.offset);
  assert.deepEqual(back, data);
});
