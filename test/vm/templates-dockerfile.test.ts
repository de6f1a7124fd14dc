/**
 * Dockerfile builds end to end through the real service (docs/templates.md, "Dockerfile builds"):
 * a Dockerfile FROM the default image with ARG, ENV, WORKDIR, COPY --chown (names resolved in
 * the build VM), RUN and USER builds in build VMs; a runtime from the template sees the files,
 * their owners, the ENV and the WORKDIR; a rebuild with only its last step changed takes every
 * earlier step from the cache; a failing RUN makes the template `failed` with its step, exit code
 * and output; a CMD is started before the template is sealed and waited for on its port, so a
 * runtime from it is already serving. Run under the VM lock:
 *   flock /tmp/vessel-vm.lock node --test dist/test/vm/templates-dockerfile.test.js
 */
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { Service } from '../support/service.js';
import { sseEvents, type Sse } from '../support/sse.js';
import { tarOf } from '../support/tar-stream.js';

const TIMEOUT = { timeout: 600_000 };
let svc: Service;

before(async () => {
  // No warm pool: this file boots only what it asks for.
  svc = new Service({ VESSEL_WARM_POOL: '0' });
  await svc.start();
}, { timeout: 900_000 });

after(async () => {
  await svc?.destroy();
});

const dockerfile = (lastStep: string): string => `FROM vessel
ARG GREETING=hello
ENV APP_GREETING="$GREETING world"
WORKDIR /app
COPY --chown=nobody:nogroup hello.txt ./
RUN echo "$APP_GREETING from $(pwd)" > made.txt
USER nobody
${lastStep}
`;

const context = (text: string): Buffer => tarOf([
  { path: 'Dockerfile', body: text },
  { path: 'hello.txt', body: 'from the context\n' },
  { path: 'secret.txt', body: 'left out\n' },
  { path: '.dockerignore', body: 'secret.txt\n' },
]);

async function build(name: string, text: string, query = ''): Promise<Sse[]> {
  const res = await fetch(`${svc.url}/v1/templates?name=${name}&dockerfile=Dockerfile${query}`, {
    method: 'POST',
    headers: { authorization: `Bearer ${svc.token}`, 'content-type': 'application/x-tar' },
    body: new Uint8Array(context(text)),
  });
  const created = (await res.json()) as { data: { state: string; source: unknown } };
  assert.equal(res.status, 201, JSON.stringify(created));
  assert.equal(created.data.state, 'building');
  const log = await fetch(`${svc.url}/v1/templates/${name}/build`, { headers: { authorization: `Bearer ${svc.token}` } });
  assert.equal(log.status, 200);
  const events: Sse[] = [];
  for await (const e of sseEvents(log)) events.push(e);
  return events;
}

/** Each step's name with whether it came from the cache. */
function steps(events: Sse[]): [string, boolean][] {
  const names = new Map<number, string>();
  const out: [string, boolean][] = [];
  for (const e of events) {
    if (e.event === 'step') names.set(e.data.step as number, e.data.name as string);
    if (e.event === 'step_done') out.push([names.get(e.data.step as number)!, e.data.cached as boolean]);
  }
  return out;
}

const exec = async (runtime: string, command: string, user?: string) => (await svc.call('POST', `/v1/runtimes/${runtime}/exec`, { command, ...(user === undefined ? {} : { user }) })).body.data;

test('a Dockerfile builds in build VMs; a runtime from it sees its files, owners, ENV, WORKDIR and USER; a rebuild of its last step hits the cache', TIMEOUT, async () => {
  const first = await build('app', dockerfile('RUN id -un > /tmp/who'), `&build_args=${encodeURIComponent(JSON.stringify({ GREETING: 'hi' }))}`);
  assert.deepEqual(first.at(-1)!.data, { state: 'ready', failure: null }, JSON.stringify(first.slice(-4)));
  assert.deepEqual(steps(first), [
    ['read the build context', false],
    ['start a build VM from vessel', false],
    ['WORKDIR /app', false],
    ['COPY --chown=nobody:nogroup hello.txt /app', false],
    ['RUN echo "$APP_GREETING from $(pwd)" > made.txt', false],
    ['RUN id -un > /tmp/who', false],
  ]);
  assert.ok(first.some((e) => e.event === 'output' && String(e.data.text).includes('1 left out by .dockerignore')), 'the context was read with .dockerignore applied');
  const t = (await svc.call('GET', '/v1/templates/app')).body.data;
  assert.equal(t.state, 'ready');
  assert.equal(t.source.dockerfile, 'Dockerfile');
  assert.deepEqual(t.source.egress_policy, { enabled: true, allowed_hosts: [] }, "a build's egress is closed unless asked");
  assert.equal(t.config.env.APP_GREETING, 'hi world');
  assert.equal(t.config.workdir, '/app');
  assert.equal(t.config.user, 'nobody');
  // The build VM is gone; its layers are the tenant's checkpoints.
  assert.deepEqual((await svc.call('GET', '/v1/runtimes')).body.data, []);

  const rt = await svc.call('POST', '/v1/runtimes', { display_name: 'from-app', template: 'app' });
  assert.equal(rt.status, 201, JSON.stringify(rt.body));
  const r = await exec('from-app', 'cat made.txt; stat -c %U:%G hello.txt; cat /tmp/who; ls; echo "$APP_GREETING"; id -un; echo "$HOME"');
  assert.equal(r.exit_code, 0, r.stderr);
  assert.equal(r.stdout, 'hi world from /app\nnobody:nogroup\nnobody\nhello.txt\nmade.txt\nhi world\nnobody\n/nonexistent\n', 'execs run as USER, with its HOME');
  const asRoot = await exec('from-app', 'id -un; echo "$HOME"; touch /app/by-root', 'root');
  assert.deepEqual([asRoot.exit_code, asRoot.stdout], [0, 'root\n/root\n'], "a request's user wins");
  const denied = await exec('from-app', 'touch /app/by-nobody');
  assert.notEqual(denied.exit_code, 0, 'nobody cannot write where root owns the directory');

  const second = await build('app-2', dockerfile('RUN id -un > /tmp/who-2'), `&build_args=${encodeURIComponent(JSON.stringify({ GREETING: 'hi' }))}`);
  assert.deepEqual(second.at(-1)!.data, { state: 'ready', failure: null });
  assert.deepEqual(steps(second), [
    ['read the build context', false],
    ['WORKDIR /app', true],
    ['COPY --chown=nobody:nogroup hello.txt /app', true],
    ['RUN echo "$APP_GREETING from $(pwd)" > made.txt', true],
    ['start a build VM from the cached layers', false],
    ['RUN id -un > /tmp/who-2', false],
  ]);
  // The template stays while a runtime made from it does; its layers stay after it, as the cache.
  const refused = await svc.call('DELETE', '/v1/templates/app');
  assert.deepEqual([refused.status, refused.body.error?.code], [409, 'failed_precondition'], JSON.stringify(refused.body));
  assert.equal((await svc.call('DELETE', '/v1/runtimes/from-app')).status, 200);
  assert.equal((await svc.call('DELETE', '/v1/templates/app')).status, 200);
  const layers = (await svc.call('GET', '/v1/checkpoints')).body.data.map((cp: { display_name: string }) => cp.display_name);
  assert.equal(layers.filter((n: string) => n.startsWith('build-layer-')).length, 5, JSON.stringify(layers));
});

test('CMD is the start command: started after the last step, waited for on its port, and already serving in a runtime from the template', TIMEOUT, async () => {
  const events = await build('served', 'FROM vessel\nWORKDIR /app\nCMD ["python3", "-m", "http.server", "8000"]\n', '&ready_port=8000&ready_timeout_secs=120');
  assert.deepEqual(events.at(-1)!.data, { state: 'ready', failure: null }, JSON.stringify(events.slice(-4)));
  assert.deepEqual(steps(events).slice(-2), [
    ['start command: ["python3","-m","http.server","8000"]', false],
    ['wait until ready: port 8000 accepts connections', false],
  ]);
  assert.ok(events.some((e) => e.event === 'output' && /ready after \d+ checks?/.test(String(e.data.text))), 'the wait reports its checks');
  assert.deepEqual((await svc.call('GET', '/v1/templates/served')).body.data.config.cmd, ['python3', '-m', 'http.server', '8000']);

  const rt = await svc.call('POST', '/v1/runtimes', { display_name: 'served-1', template: 'served' });
  assert.equal(rt.status, 201, JSON.stringify(rt.body));
  // The first command in the fork: nothing is started, the server answers from the template's WORKDIR.
  const r = await exec('served-1', 'python3 -c \'import urllib.request; r = urllib.request.urlopen("http://127.0.0.1:8000/", timeout=10); print(r.status, b"Directory listing for /" in r.read())\'');
  assert.deepEqual([r.exit_code, r.stdout], [0, '200 True\n'], r.stderr);
  const processes = (await svc.call('GET', '/v1/runtimes/served-1/processes')).body.data as { command: string; status: string }[];
  assert.ok(processes.some((p) => p.status === 'running' && p.command.includes('http.server')), JSON.stringify(processes));
  assert.equal((await svc.call('DELETE', '/v1/runtimes/served-1')).status, 200);
});

test("a failing RUN makes the template failed, with the step, its exit code and its output's tail", TIMEOUT, async () => {
  const events = await build('broken', 'FROM vessel\nRUN echo about to fail >&2; exit 3\n');
  const done = events.at(-1)!;
  assert.equal(done.event, 'done');
  assert.equal(done.data.state, 'failed');
  const t = (await svc.call('GET', '/v1/templates/broken')).body.data;
  assert.equal(t.state, 'failed');
  assert.equal(t.failure.step, 'RUN echo about to fail >&2; exit 3');
  assert.equal(t.failure.exit_code, 3);
  assert.match(t.failure.output_tail, /about to fail\n[^]*returned a non-zero code: 3/);
  assert.deepEqual((await svc.call('GET', '/v1/runtimes')).body.data, [], 'the failed build left no build VM');
});
