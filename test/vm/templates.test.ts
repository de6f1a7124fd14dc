/**
 * Templates end to end through the real service (docs/templates.md): an OCI archive uploaded,
 * and the same image pushed to a docker-registry on loopback (opened with
 * VESSEL_TEMPLATE_REGISTRIES_ALLOWED), each built by the API's process and handed to root; the
 * build log streamed; a runtime booted from the template reads a file only the image has, with
 * the image's ENV and WORKDIR as its exec defaults; the template cannot go while the runtime
 * stands on it, and goes after. Run under the VM lock:
 *   flock /tmp/vessel-vm.lock node --test dist/test/vm/templates.test.js
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { LocalRegistry, writeOciLayout } from '../support/oci-layout.js';
import { Service } from '../support/service.js';
import { sseEvents, type Sse } from '../support/sse.js';
import { tarOf } from '../support/tar-stream.js';

const TIMEOUT = { timeout: 600_000 };
const dir = mkdtempSync(join(tmpdir(), 'vessel-templates-vm-'));
let registry: LocalRegistry;
let svc: Service;
let archive: Buffer;

before(async () => {
  // An image with no shell and no init (as a distroless one): merged /usr, a file of its own, ENV and WORKDIR.
  const layout = join(dir, 'layout');
  writeOciLayout(layout, {
    layers: [
      tarOf([
        { path: 'usr/bin/', type: 'Directory' },
        { path: 'usr/sbin/', type: 'Directory' },
        { path: 'bin', type: 'SymbolicLink', linkpath: 'usr/bin' },
        { path: 'sbin', type: 'SymbolicLink', linkpath: 'usr/sbin' },
        { path: 'etc/os-release', body: 'ID=vessel-template-test\n' },
        { path: 'app/hello.txt', body: 'only the image has this\n' },
      ], { gzip: true }),
    ],
    config: { Env: ['PATH=/.vessel/bin:/usr/bin:/bin', 'GREETING=from the image'], WorkingDir: '/app', Cmd: ['/app/server'] },
  });
  execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', `oci:${layout}:image`, `oci-archive:${join(dir, 'image.tar')}`]);
  archive = readFileSync(join(dir, 'image.tar'));
  registry = await LocalRegistry.start(join(dir, 'registry'));
  execFileSync('skopeo', ['copy', '--quiet', '--insecure-policy', '--dest-tls-verify=false', `oci:${layout}:image`, `docker://${registry.host}/team/app:1`]);
  // No warm pool: this file boots only what it asks for.
  svc = new Service({ VESSEL_WARM_POOL: '0', VESSEL_TEMPLATE_REGISTRIES_ALLOWED: registry.host });
  await svc.start();
}, { timeout: 900_000 });

after(async () => {
  await svc?.destroy();
  registry?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** The build log from its first event to `done`. */
async function buildLog(name: string): Promise<Sse[]> {
  const res = await fetch(`${svc.url}/v1/templates/${name}/build`, { headers: { authorization: `Bearer ${svc.token}` } });
  assert.equal(res.status, 200);
  const events: Sse[] = [];
  for await (const e of sseEvents(res)) events.push(e);
  return events;
}

test('an uploaded OCI archive becomes a template; its build log streams each step to ready', TIMEOUT, async () => {
  const res = await fetch(`${svc.url}/v1/templates?name=from-archive`, { method: 'POST', headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/x-tar' }, body: new Uint8Array(archive) });
  const created = (await res.json()) as { data: { state: string; source: unknown } };
  assert.equal(res.status, 201, JSON.stringify(created));
  assert.equal(created.data.state, 'building');
  assert.deepEqual(created.data.source, { archive_bytes: archive.length });
  const events = await buildLog('from-archive');
  const steps = events.filter((e) => e.event === 'step').map((e) => e.data.name);
  assert.deepEqual(steps, ['read the image archive', 'apply 1 layer', 'add the Vessel guest', 'write the root disk', 'hand the disk to the VM host']);
  assert.deepEqual(events.at(-1), { event: 'done', data: { state: 'ready', failure: null }, id: events.at(-1)!.id });
  const t = (await svc.call('GET', '/v1/templates/from-archive')).body.data;
  assert.equal(t.state, 'ready');
  assert.deepEqual(t.config.env, { PATH: '/.vessel/bin:/usr/bin:/bin', GREETING: 'from the image' });
  assert.ok(existsSync(join(svc.dataDir, 'templates', t.id, 'root.img')), "root holds the template's disk");
  assert.equal(existsSync(join(svc.dataDir, 'store', 'template-builds', t.id)), false, "the API's build files are gone");
});

test('the same image from a registry on loopback, which the operator opened', TIMEOUT, async () => {
  const created = await svc.call('POST', '/v1/templates', { name: 'from-registry', image: `${registry.host}/team/app:1` });
  assert.equal(created.status, 201, JSON.stringify(created.body));
  const events = await buildLog('from-registry');
  assert.deepEqual(events.filter((e) => e.event === 'step').map((e) => e.data.name).slice(0, 2), [`check the registry of ${registry.host}/team/app:1`, `pull ${registry.host}/team/app:1`]);
  assert.deepEqual(events.at(-1)!.data, { state: 'ready', failure: null });
  // A loopback registry the operator did not open fails the build, and says why.
  const closed = await svc.call('POST', '/v1/templates', { name: 'closed', image: `127.0.0.2:${registry.host.split(':')[1]}/team/app:1` });
  assert.equal(closed.status, 201);
  const end = (await buildLog('closed')).at(-1)!;
  assert.equal(end.data.state, 'failed');
  assert.match(end.data.failure.output_tail, /resolves to 127\.0\.0\.2, an address builds may not pull from/);
  assert.equal((await svc.call('DELETE', '/v1/templates/from-registry')).status, 200);
  assert.equal((await svc.call('DELETE', '/v1/templates/closed')).status, 200);
});

test('a runtime from the template reads what only the image has, with its ENV and WORKDIR; its checkpoint and fork stand on the template; the template goes once they have', TIMEOUT, async () => {
  const made = await svc.call('POST', '/v1/runtimes', { display_name: 'on-template', template: 'from-archive', resources: { limits: { memory_mib: 256 } } });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const templateId = made.body.data.template_id;
  assert.equal(typeof templateId, 'string');
  // The image has no shell: the argv form, through the guest kit's busybox (on the image's PATH).
  const exec = async (args: string[], extra: object = {}) => {
    const r = await svc.call('POST', '/v1/runtimes/on-template/exec', { command: '/.vessel/bin/busybox', args, ...extra });
    assert.equal(r.status, 200, JSON.stringify(r.body));
    return r.body.data as { exit_code: number; stdout: string; stderr: string };
  };
  const hello = await exec(['cat', 'hello.txt']);
  assert.deepEqual([hello.exit_code, hello.stdout], [0, 'only the image has this\n'], 'a file only the image has, read from its WORKDIR');
  const env = (await exec(['env'])).stdout;
  assert.match(env, /^GREETING=from the image$/m, "the image's ENV");
  assert.match(env, /^PATH=\/\.vessel\/bin:\/usr\/bin:\/bin$/m, "the image's PATH over the guest's default");
  assert.equal((await exec(['pwd'])).stdout, '/app\n', 'WORKDIR');
  assert.equal((await exec(['pwd'], { cwd: '/' })).stdout, '/\n', "the request's cwd wins");
  assert.match((await exec(['env'], { env: { GREETING: 'mine' } })).stdout, /^GREETING=mine$/m, "the request's env wins");
  assert.equal((await exec(['cat', '/etc/os-release'])).stdout, 'ID=vessel-template-test\n');

  // A checkpoint of it stands on the template too, and its fork keeps the template's defaults.
  assert.equal((await exec(['sh', '-c', 'echo written in the runtime > /app/mine.txt; sync'])).exit_code, 0);
  const cp = await svc.call('POST', '/v1/runtimes/on-template/checkpoints', { name: 'on-template-snap' });
  assert.equal(cp.status, 201, JSON.stringify(cp.body));
  let state = cp.body.data.state;
  while (state === 'creating') {
    await new Promise((r) => setTimeout(r, 100));
    state = (await svc.call('GET', `/v1/checkpoints/${cp.body.data.id}`)).body.data.state;
  }
  assert.equal(state, 'ready');
  const fork = await svc.call('POST', '/v1/runtimes', { display_name: 'fork-of-template', checkpoint: 'on-template-snap' });
  assert.equal(fork.status, 201, JSON.stringify(fork.body));
  assert.equal(fork.body.data.template_id, templateId);
  const inFork = await svc.call('POST', '/v1/runtimes/fork-of-template/exec', { command: '/.vessel/bin/busybox', args: ['sh', '-c', 'cat mine.txt hello.txt; echo "$GREETING"'] });
  assert.equal(inFork.body.data.stdout, 'written in the runtime\nonly the image has this\nfrom the image\n', JSON.stringify(inFork.body));

  const refused = await svc.call('DELETE', '/v1/templates/from-archive');
  assert.deepEqual([refused.status, refused.body.error?.code], [409, 'failed_precondition'], JSON.stringify(refused.body));
  assert.match(refused.body.error.message, /in use by 2 runtimes and 1 checkpoint;/);
  for (const rt of ['on-template', 'fork-of-template']) assert.equal((await svc.call('DELETE', `/v1/runtimes/${rt}`)).status, 200);
  assert.match((await svc.call('DELETE', '/v1/templates/from-archive')).body.error?.message ?? '', /in use by 1 checkpoint;/);
  assert.equal((await svc.call('DELETE', '/v1/checkpoints/on-template-snap')).status, 200);
  assert.equal((await svc.call('DELETE', '/v1/templates/from-archive')).status, 200);
  assert.equal(existsSync(join(svc.dataDir, 'templates', templateId)), false, "the template's disk is gone");
});
