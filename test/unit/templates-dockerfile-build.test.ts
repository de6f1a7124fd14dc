/**
 * A Dockerfile build's steps as they reach the build VMs (templates/dockerfile-build.ts), with a
 * fake BuildVms that records them: what runs (and as whom), what a COPY's tar stream holds (paths,
 * owners, modes), the cache (hits skip their steps; the VM starts on the last hit), and failures.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { Parser, type ReadEntry } from 'tar';
import { BuildLog, type BuildEvent } from '../../src/core/build-log.js';
import type { BuildVm, BuildVmBase, BuildVms } from '../../src/core/ports.js';
import type { ReadyCheck, TemplateConfig } from '../../src/core/types.js';
import { portCheckArgv, type ReadyClock } from '../../src/templates/start-command.js';
import { startKey } from '../../src/templates/step-keys.js';
import { BuildFailure } from '../../src/core/templates.js';
import { BlobStore } from '../../src/templates/blob-store.js';
import { buildDockerfile } from '../../src/templates/dockerfile-build.js';
import { resolveUser } from '../../src/core/guest-users.js';
import { tarOf } from '../support/tar-stream.js';

const PASSWD = 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\napp:x:1000:1000::/home/app:/bin/sh\n';
const GROUP = 'root:x:0:\nnogroup:x:65534:\nstaff:x:50:\ndocker:x:999:bob,app\nwheel:x:10:bob\n';

interface Copied {
  dir: string;
  entries: { path: string; type: string; uid: number; gid: number; mode: number; body: string }[];
}

interface Run {
  argv: string[];
  env: Record<string, string>;
  cwd: string;
  user: string;
}

class FakeVms implements BuildVms {
  readonly layers = new Map<string, string>();
  readonly starts: BuildVmBase[] = [];
  readonly runs: Run[] = [];
  readonly dirs: string[] = [];
  readonly copies: Copied[] = [];
  readonly sealed: string[] = [];
  /** Background processes started, in order, each with what the VM had done before it. */
  readonly processes: (Run & { after: number })[] = [];
  destroyed = 0;
  exitCode = 0;
  /** Exit codes of the ready checks in turn (a /bin/sh -c run that is not a RUN step); 0 once used up. */
  readyCodes: number[] = [];
  /** The started process exits with this code once this many ready checks have run; null: it never does. */
  processExit: { code: number; afterChecks: number } | null = null;
  checks = 0;
  templates = new Map<string, TemplateConfig>();

  defaultImageId = () => 'img1';
  template = async (ref: string) => {
    const config = this.templates.get(ref);
    if (config === undefined) throw new Error('no templates here');
    return { id: `tpl-${ref}`, config };
  };
  findLayer = async (key: string) => this.layers.get(key) ?? null;

  async start(base: BuildVmBase): Promise<BuildVm> {
    this.starts.push(base);
    return this.#vm();
  }

  #vm(): BuildVm {
    const vms = { runs: this.runs, dirs: this.dirs, copies: this.copies, layers: this.layers, sealed: this.sealed, exitCode: () => this.exitCode, destroyed: () => this.destroyed++ };
    return {
      run: async (argv, env, cwd, user, onOutput) => {
        vms.runs.push({ argv, env, cwd, user });
        onOutput(`ran ${argv.at(-1)}\n`);
        if (this.processes.length > 0) {
          this.checks++;
          return this.readyCodes.shift() ?? 0;
        }
        return vms.exitCode();
      },
      startProcess: async (argv, env, cwd, user) => {
        this.processes.push({ argv, env, cwd, user, after: vms.runs.length + vms.copies.length + vms.dirs.length });
        return 7;
      },
      exitCodeOf: async (processId) => {
        assert.equal(processId, 7);
        const exit = this.processExit;
        return exit !== null && this.checks >= exit.afterChecks ? exit.code : null;
      },
      outputTail: async (processId, maxBytes) => {
        assert.equal(processId, 7);
        assert.ok(maxBytes > 0 && maxBytes <= 4096);
        return 'Traceback: address already in use\n';
      },
      async readFile(path) {
        return Buffer.from(path === '/etc/passwd' ? PASSWD : GROUP);
      },
      async makeDir(path) {
        vms.dirs.push(path);
      },
      async writeArchive(dir, tar) {
        vms.copies.push({ dir, entries: await entriesOf(tar) });
      },
      async seal(key) {
        const id = `cp-${vms.layers.size + 1}`;
        vms.layers.set(key, id);
        vms.sealed.push(id);
        return id;
      },
      async destroy() {
        vms.destroyed();
      },
    };
  }
}

async function entriesOf(tar: Readable): Promise<Copied['entries']> {
  const out: Copied['entries'] = [];
  const parser = new Parser({
    onReadEntry: (e: ReadEntry) => {
      const chunks: Buffer[] = [];
      e.on('data', (c: Buffer) => chunks.push(c));
      e.on('end', () => out.push({ path: e.path, type: e.type, uid: e.uid!, gid: e.gid!, mode: e.mode!, body: Buffer.concat(chunks).toString() }));
    },
  });
  for await (const chunk of tar) parser.write(chunk as Buffer);
  await new Promise<void>((resolve) => parser.end(resolve));
  return out;
}

const NO_READY: ReadyCheck = { command: null, port: null, timeoutSecs: 300 };

/** Time that moves only when the wait sleeps: a deadline passes after so many checks, never by the host's speed. */
class FakeClock implements ReadyClock {
  t = 1_000_000;
  now = () => this.t;
  sleep = async (ms: number) => {
    this.t += ms;
  };
}

type RunBuild = (vms: FakeVms, buildArgs?: Record<string, string>, ready?: ReadyCheck, log?: BuildLog) => Promise<{ events: BuildEvent[]; checkpointId: string | undefined }>;

async function withBuild(files: Record<string, string>, work: (run: RunBuild) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), 'vessel-dockerfile-build-'));
  try {
    const context = join(dir, 'context.tar');
    writeFileSync(context, tarOf(Object.entries(files).map(([path, body]) => ({ path, body, ...(path.startsWith('bin/') ? { mode: 0o755 } : {}) }))));
    await work(async (vms, buildArgs = {}, ready = NO_READY, log = new BuildLog()) => {
      const built = await buildDockerfile({ contextFile: context, blobs: new BlobStore(join(dir, `blobs-${Math.random()}`)), dockerfile: 'Dockerfile', buildArgs, vms, report: log, signal: new AbortController().signal, ready, clock: new FakeClock() });
      log.finish('ready', null);
      const events: BuildEvent[] = [];
      for await (const e of log.read()) events.push(e);
      return { events, checkpointId: built.checkpointId };
    });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const stepsOf = (events: BuildEvent[]) => {
  const names = new Map<number, string>();
  return events.flatMap((e) => {
    if (e.event === 'step') names.set(e.step, e.name);
    return e.event === 'step_done' ? [[names.get(e.step), e.cached] as const] : [];
  });
};

const DOCKERFILE = `FROM vessel
ARG V=1
ENV GREETING="hello $V" PATH=/opt/bin:$PATH
WORKDIR /app
COPY --chown=app:staff --chmod=0750 src/ bin/tool ./
COPY notes.txt /etc/notes
USER nobody
RUN echo "$GREETING"
CMD ["python3", "-m", "http.server"]
`;

test('steps run in the build VM in order: WORKDIR as mkdir, COPY as tar streams with --chown and --chmod, RUN with its env and cwd as USER', async () => {
  await withBuild({ Dockerfile: DOCKERFILE, 'src/a.py': 'print(1)\n', 'src/lib/b.py': 'x = 2\n', 'bin/tool': '#!/bin/sh\n', 'notes.txt': 'n\n', 'unused.txt': 'u\n' }, async (run) => {
    const vms = new FakeVms();
    const { events, checkpointId } = await run(vms, { V: '2' });
    assert.deepEqual(stepsOf(events), [
      ['read the build context', false],
      ['start a build VM from vessel', false],
      ['WORKDIR /app', false],
      ['COPY --chown=app:staff src bin/tool /app', false],
      ['COPY notes.txt /etc/notes', false],
      ['RUN echo "$GREETING"', false],
      ['start command: ["python3","-m","http.server"]', false],
      // finish() ends the last step
    ]);
    assert.deepEqual(vms.starts, [{ kind: 'default' }]);
    assert.deepEqual(vms.dirs, ['/app']);
    // A directory's contents go into the destination; a file under it; owners and modes from the flags.
    assert.deepEqual(vms.copies[0], {
      dir: '/app',
      entries: [
        { path: 'a.py', type: 'File', uid: 1000, gid: 50, mode: 0o750, body: 'print(1)\n' },
        { path: 'lib/', type: 'Directory', uid: 1000, gid: 50, mode: 0o750, body: '' },
        { path: 'lib/b.py', type: 'File', uid: 1000, gid: 50, mode: 0o750, body: 'x = 2\n' },
        { path: 'tool', type: 'File', uid: 1000, gid: 50, mode: 0o750, body: '#!/bin/sh\n' },
      ],
    });
    // A file to a path that is not a directory: it lands under that name, root's, its own mode.
    assert.deepEqual(vms.copies[1], { dir: '/etc', entries: [{ path: 'notes', type: 'File', uid: 0, gid: 0, mode: 0o644, body: 'n\n' }] });
    assert.equal(vms.runs.length, 1);
    const r = vms.runs[0]!;
    assert.deepEqual(r.argv, ['/bin/sh', '-c', 'echo "$GREETING"']);
    assert.equal(r.user, 'nobody', 'the agent becomes USER (its ids are looked up in the guest)');
    assert.equal(r.cwd, '/app');
    assert.equal(r.env.GREETING, 'hello 2');
    assert.equal(r.env.PATH, '/opt/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin');
    assert.equal(r.env.V, '2');
    // CMD starts after the last step, with the template's ENV, WORKDIR and USER, and is sealed running.
    assert.equal(vms.processes.length, 1);
    const p = vms.processes[0]!;
    assert.deepEqual([p.argv, p.cwd, p.user, p.env.GREETING, p.after], [['python3', '-m', 'http.server'], '/app', 'nobody', 'hello 2', 4]);
    assert.equal(p.env.V, undefined, 'an ARG is not in the start command\'s environment, as in a container');
    assert.deepEqual(vms.sealed, ['cp-1', 'cp-2', 'cp-3', 'cp-4', 'cp-5']);
    assert.equal(checkpointId, 'cp-5');
    assert.equal(vms.destroyed, 1);
  });
});

test('a rebuild finds every unchanged step in the cache and starts its VM on the last one; a fully cached build starts none', async () => {
  const files = (last: string) => ({ Dockerfile: `FROM vessel\nWORKDIR /app\nCOPY a.txt .\nRUN ${last}\n`, 'a.txt': 'a\n' });
  const vms = new FakeVms();
  await withBuild(files('echo one'), async (run) => {
    await run(vms);
  });
  assert.equal(vms.sealed.length, 3);
  await withBuild(files('echo two'), async (run) => {
    const { events, checkpointId } = await run(vms);
    assert.deepEqual(stepsOf(events), [
      ['read the build context', false],
      ['WORKDIR /app', true],
      ['COPY a.txt /app', true],
      ['start a build VM from the cached layers', false],
      ['RUN echo two', false],
    ]);
    assert.deepEqual(vms.starts.at(-1), { kind: 'layer', checkpointId: 'cp-2' });
    assert.equal(checkpointId, 'cp-4');
  });
  const starts = vms.starts.length;
  await withBuild(files('echo two'), async (run) => {
    const { checkpointId } = await run(vms);
    assert.equal(checkpointId, 'cp-4');
  });
  assert.equal(vms.starts.length, starts, 'a build whose every step is cached boots nothing');
  // A changed file copied changes the COPY's key and everything after it.
  await withBuild({ ...files('echo two'), 'a.txt': 'changed\n' }, async (run) => {
    const { events } = await run(vms);
    assert.deepEqual(stepsOf(events).map(([, cached]) => cached), [false, true, false, false, false]);
  });
});

test('a failing RUN is a BuildFailure with its exit code, and its VM is removed', async () => {
  await withBuild({ Dockerfile: 'FROM vessel\nRUN exit 7\n' }, async (run) => {
    const vms = new FakeVms();
    vms.exitCode = 7;
    await assert.rejects(run(vms), (err: unknown) => err instanceof BuildFailure && err.exitCode === 7 && /RUN exit 7: the command returned a non-zero code: 7/.test(err.message));
    assert.equal(vms.destroyed, 1);
    assert.deepEqual(vms.sealed, []);
  });
});

test('what builds only on the default image or a template is refused with the reason', async () => {
  for (const [text, message] of [
    ['FROM vessel AS a\nRUN true\nFROM vessel\nCOPY --from=a /x /x\n', /multi-stage/],
    ['FROM scratch\nCOPY a /a\n', /FROM scratch is not supported/],
    ['FROM vessel\nADD x.tar.gz /opt/\n', /extracting a local archive is not supported yet/],
    ['FROM vessel\nCOPY --chown=ghost a /a\n', /unable to find user ghost/],
  ] as const) {
    await withBuild({ Dockerfile: text, a: 'a', 'x.tar.gz': 'not really' }, async (run) => {
      await assert.rejects(run(new FakeVms()), (err: unknown) => err instanceof Error && message.test(err.message), text);
    });
  }
});

test("user[:group] resolves against the guest's passwd and group as Docker's does", () => {
  assert.deepEqual(resolveUser('app', PASSWD, GROUP), { uid: 1000, gid: 1000, name: 'app', home: '/home/app', groups: [1000, 999] });
  assert.deepEqual(resolveUser('app:staff', PASSWD, GROUP), { uid: 1000, gid: 50, name: 'app', home: '/home/app', groups: [50, 999] });
  assert.deepEqual(resolveUser('1234', PASSWD, GROUP), { uid: 1234, gid: 0, name: null, home: null, groups: [] }, 'a uid without an entry is taken as it is');
  assert.deepEqual(resolveUser('1000:65534', PASSWD, GROUP), { uid: 1000, gid: 65534, name: 'app', home: '/home/app', groups: [65534, 999] });
  assert.deepEqual(resolveUser('nobody', PASSWD, null).groups, [65534], "no /etc/group: the user's own group alone");
  assert.throws(() => resolveUser('app:nogroup-here', PASSWD, GROUP), /unable to find group/);
  assert.throws(() => resolveUser('ghost', null, null), /unable to find user ghost/);
  assert.throws(() => resolveUser('9999999999', PASSWD, GROUP), /not a valid id/);
});

const SERVER = 'FROM vessel\nENV MODE=dev\nWORKDIR /srv\nUSER nobody\nCMD python3 -m http.server 8000\n';
const logText = (events: BuildEvent[]) => events.flatMap((e) => (e.event === 'output' ? [e.text] : [])).join('');

test('a ready check runs in the build VM as USER until it passes; the layer is sealed then, with the start command running', async () => {
  await withBuild({ Dockerfile: SERVER }, async (run) => {
    const vms = new FakeVms();
    vms.readyCodes = [1, 1, 0];
    const { events, checkpointId } = await run(vms, {}, { command: null, port: 8000, timeoutSecs: 300 });
    assert.deepEqual(stepsOf(events).slice(2), [
      ['WORKDIR /srv', false],
      ['start command: python3 -m http.server 8000', false],
      ['wait until ready: port 8000 accepts connections', false],
    ]);
    assert.deepEqual(vms.processes.map((p) => [p.argv, p.user, p.cwd, p.env.MODE]), [[['/bin/sh', '-c', 'python3 -m http.server 8000'], 'nobody', '/srv', 'dev']]);
    assert.equal(vms.runs.length, 3, 'checked until the third check passed');
    for (const r of vms.runs) assert.deepEqual([r.argv, r.user, r.cwd], [portCheckArgv(8000), 'nobody', '/srv']);
    assert.match(portCheckArgv(8000)[2]!, /\/dev\/tcp\/127\.0\.0\.1\/8000/);
    assert.match(logText(events), /ready after 3 checks/);
    assert.deepEqual(vms.sealed, ['cp-1', 'cp-2']);
    assert.equal(checkpointId, 'cp-2', 'the template is the layer sealed after the ready check');
  });
});

test("the start layer's key covers the command and its check, not the deadline: a rebuild with another check reuses every step's layer", async () => {
  const vms = new FakeVms();
  const port = { command: null, port: 8000, timeoutSecs: 300 };
  await withBuild({ Dockerfile: SERVER }, async (run) => {
    await run(vms, {}, port);
    const starts = vms.starts.length;
    const again = await run(vms, {}, { ...port, timeoutSecs: 60 });
    assert.deepEqual(stepsOf(again.events).slice(1).map(([, cached]) => cached), [true, true], 'the deadline changes no key');
    assert.equal(vms.starts.length, starts, 'a fully cached build boots nothing');
    const cmd = await run(vms, {}, { command: 'curl -sf localhost:8000', port: null, timeoutSecs: 300 });
    assert.deepEqual(stepsOf(cmd.events).slice(1), [
      ['WORKDIR /srv', true],
      ['start a build VM from the cached layers', false],
      ['start command: python3 -m http.server 8000', false],
      ['wait until ready: curl -sf localhost:8000', false],
    ]);
    assert.deepEqual(vms.runs.at(-1)!.argv, ['/bin/sh', '-c', 'curl -sf localhost:8000']);
  });
  const spec = { argv: ['python3', '-m', 'http.server'], env: [['A', '1'], ['B', '2']] as [string, string][], workdir: '/', user: 'root' };
  const key = startKey('sha256:parent', spec, { command: null, port: 8000 });
  assert.equal(startKey('sha256:parent', { ...spec, env: [['B', '2'], ['A', '1']] }, { command: null, port: 8000 }), key, 'env order is not content');
  for (const other of [
    startKey('sha256:other', spec, { command: null, port: 8000 }),
    startKey('sha256:parent', { ...spec, argv: ['python3'] }, { command: null, port: 8000 }),
    startKey('sha256:parent', { ...spec, user: 'nobody' }, { command: null, port: 8000 }),
    startKey('sha256:parent', spec, { command: null, port: 8001 }),
    startKey('sha256:parent', spec, { command: 'true', port: null }),
    startKey('sha256:parent', spec, { command: null, port: null }),
  ]) assert.notEqual(other, key);
});

test("ENTRYPOINT and CMD combine by Docker's rules; an inherited CMD is not run again; no CMD runs nothing", async () => {
  const argvOf = async (dockerfile: string, vms = new FakeVms()) => {
    let argv: string[] | null = null;
    await withBuild({ Dockerfile: dockerfile }, async (run) => {
      await run(vms);
      argv = vms.processes[0]?.argv ?? null;
    });
    return argv;
  };
  const only = new FakeVms();
  assert.deepEqual(await argvOf('FROM vessel\nENTRYPOINT ["jupyter", "lab"]\nCMD ["--port", "8888"]\n', only), ['jupyter', 'lab', '--port', '8888']);
  assert.deepEqual([only.starts, only.sealed], [[{ kind: 'default' }], ['cp-1']], 'no step: the start layer alone, on the base');
  assert.deepEqual(await argvOf('FROM vessel\nENTRYPOINT ["/entry.sh"]\nCMD serve now\n'), ['/entry.sh', '/bin/sh', '-c', 'serve now']);
  // A shell-form ENTRYPOINT: CMD's words follow as sh's $0 and on, which the text does not use (as in Docker).
  assert.deepEqual(await argvOf('FROM vessel\nCMD ["x"]\nENTRYPOINT node app.js\n'), ['/bin/sh', '-c', 'node app.js', 'x']);
  assert.equal(await argvOf('FROM vessel\nRUN true\n'), null);
  assert.equal(await argvOf('FROM vessel\nCMD []\n'), null);
  const vms = new FakeVms();
  vms.templates.set('web', { env: {}, workdir: '/srv', user: null, entrypoint: null, cmd: ['python3', '-m', 'http.server'] });
  assert.equal(await argvOf('FROM web\nRUN touch /x\n', vms), null, "the base template's CMD runs in its own layer already");
  assert.deepEqual(await argvOf('FROM web\nCMD ["python3", "-m", "http.server", "9000"]\n', vms), ['python3', '-m', 'http.server', '9000']);
});

test('a start command that exits before it is ready, or is not ready by the deadline, fails the build with its output; a check without a command is refused', async () => {
  await withBuild({ Dockerfile: SERVER }, async (run) => {
    const vms = new FakeVms();
    vms.readyCodes = [1, 1, 1, 1];
    vms.processExit = { code: 1, afterChecks: 2 };
    const log = new BuildLog();
    await assert.rejects(run(vms, {}, { command: null, port: 8000, timeoutSecs: 300 }, log), (err: unknown) =>
      err instanceof BuildFailure && err.exitCode === 1 && err.message === 'the start command exited with code 1 before it was ready');
    assert.equal(log.currentStep, 'wait until ready: port 8000 accepts connections');
    assert.match(log.tail, /address already in use/);
    assert.deepEqual([vms.checks, vms.sealed.length, vms.destroyed], [2, 1, 1], 'no start layer; the VM is removed');

    const slow = new FakeVms();
    slow.readyCodes = Array.from({ length: 100 }, () => 7);
    const slowLog = new BuildLog();
    await assert.rejects(run(slow, {}, { command: 'test -f /tmp/up', port: null, timeoutSecs: 5 }, slowLog), (err: unknown) =>
      err instanceof BuildFailure && err.exitCode === null && /not ready after 5 s \(6 checks\)/.test(err.message));
    assert.match(slowLog.tail, /address already in use[^]*the last check returned 7: ran test -f \/tmp\/up/);

    // Without a check, the command only has to be running once started.
    const quick = new FakeVms();
    quick.processExit = { code: 2, afterChecks: 0 };
    await assert.rejects(run(quick), (err: unknown) => err instanceof BuildFailure && err.exitCode === 2);
  });
  await withBuild({ Dockerfile: 'FROM vessel\nRUN true\n' }, async (run) => {
    const vms = new FakeVms();
    await assert.rejects(run(vms, {}, { command: 'true', port: null, timeoutSecs: 300 }), /sets no CMD or ENTRYPOINT/);
    assert.deepEqual(vms.starts, [], 'refused before any VM starts');
  });
});
