/**
 * The link between the API's process and the privileged host process (src/host): what the API
 * may ask is exactly the schema's, whatever it sends; the driver's errors come back as the API's;
 * a guest stream relayed through the host keeps its bytes, its end and its cancel.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { VesselError, failedPrecondition } from '../../src/core/errors.js';
import type { DiskChunk, NetworkGateway, TemplateDisks, VmDriver } from '../../src/core/ports.js';
import { serveHost, type HostParts } from '../../src/host/host-server.js';
import { RelayedAgent, RemoteHost } from '../../src/host/remote-host.js';
import { PartLink, type LinkStream } from '../../src/platform/part-link.js';
import type { AgentChannel } from '../../src/vm/agent-part.js';
import { TemplateDiskFiles } from '../../src/vm/template-disks.js';
import { duplexPair } from '../support/link-pair.js';

const FACTS = { imageId: 'img-1', egressCaPem: 'CA', hostLimits: { vcpus: 2, memoryMib: 4096 }, unavailableReason: null };
const RESOURCES = { limits: { memory_mib: 512 }, requests: { memory_mib: 512 }, vcpus: 1 };

interface Rig {
  api: PartLink;
  remote: RemoteHost;
  /** What reached the driver and the gateway, by method. */
  calls: Array<[string, unknown[]]>;
  /** The agent process's end of the relayed guest streams. */
  agentLink: PartLink;
  close(): void;
}

/** The host's side over recording fakes; the agent's process is a PartLink the test answers. */
async function rig(answers: Record<string, (...args: unknown[]) => unknown> = {}): Promise<Rig> {
  const calls: Array<[string, unknown[]]> = [];
  const recording = <T extends object>(extra: object): T =>
    new Proxy(extra, {
      get: (target, name) =>
        name === 'then'
          ? undefined
          : ((target as Record<PropertyKey, unknown>)[name] ??
            (async (...args: unknown[]) => {
              calls.push([String(name), args]);
              return answers[String(name)]?.(...args) ?? null;
            })),
    }) as T;
  const [hostEnd, apiEnd] = duplexPair();
  const [agentHostEnd, agentEnd] = duplexPair();
  const toAgent = new PartLink(agentHostEnd);
  const agentLink = new PartLink(agentEnd);
  const agentOf = (runtimeId: string): AgentChannel => ({
    runtimeId,
    call: (method, args = {}) => toAgent.call(method, { ...args, runtimeId }),
    withStream: async (method, args, directions) => {
      const stream = toAgent.openStream(directions);
      return { stream, reply: toAgent.call(method, { ...args, runtimeId, stream: stream.id }) };
    },
    vmExited: () => false,
  });
  const taps = new Map<string, string>();
  const parts: HostParts = {
    driver: recording<VmDriver & TemplateDisks & { agentOf(id: string): AgentChannel }>({ agentOf }),
    gateway: recording<NetworkGateway & { tapOf(id: string): string | undefined }>({ tapOf: (id: string) => taps.get(id) }),
    facts: FACTS,
  };
  const host = new PartLink(hostEnd);
  serveHost(host, async () => parts);
  const api = new PartLink(apiEnd);
  const facts = await api.call<typeof FACTS>('startHost', { egressCa: null });
  const remote = new RemoteHost(api, facts);
  answers.attach ??= (subject) => {
    const tap = `vsl${taps.size + 1}`;
    taps.set((subject as { runtimeId: string }).runtimeId, tap);
    return tap;
  };
  return { api, remote, calls, agentLink, close: () => [host, api, toAgent, agentLink].forEach((l) => l.close('done')) };
}

const refusedAsInvalid = (err: unknown) => err instanceof VesselError && err.code === 'invalid_argument' && /the host refused|is not/.test(err.message);

test('the host takes the ports\' calls with their arguments as the API made them', async () => {
  const r = await rig({ reattach: () => 'running', heldCheckpointIds: () => ['c1'] });
  try {
    assert.deepEqual([r.remote.imageId(), r.remote.hostLimits(), r.remote.unavailableReason()], ['img-1', FACTS.hostLimits, null]);
    const runtimeId = randomUUID();
    const tap = await r.remote.attach({ runtimeId, tenantId: 'acme', policy: { enabled: true, allowed_hosts: [] }, rules: [] });
    const spec = { runtimeId, resources: RESOURCES, fromCheckpointId: randomUUID(), hostname: 'web-1.a_b', tap };
    await r.remote.create(spec);
    assert.equal(await r.remote.reattach(runtimeId), 'running');
    assert.deepEqual(await r.remote.heldCheckpointIds(), ['c1']);
    await r.remote.stop(runtimeId, 5000);
    assert.deepEqual(
      r.calls.map(([m, a]) => [m, a[0]]),
      [
        ['attach', { runtimeId, tenantId: 'acme', policy: { enabled: true, allowed_hosts: [] }, rules: [] }],
        ['create', spec],
        ['reattach', runtimeId],
        ['heldCheckpointIds', undefined],
        ['stop', runtimeId],
      ],
    );
  } finally {
    r.close();
  }
});

test('whatever the API sends, the host does only what the schema allows, and says what it refused', async () => {
  const r = await rig();
  try {
    const id = randomUUID();
    const spec = (over: object) => ({ runtimeId: id, resources: RESOURCES, fromCheckpointId: null, hostname: 'h', tap: null, ...over });
    const hostile: Array<[string, unknown]> = [
      ['create', spec({ runtimeId: '../../etc' })],
      ['create', spec({ fromCheckpointId: '../../../root/.ssh/id_rsa' })],
      ['create', spec({ tap: 'vsl7' })], // a TAP the gateway gave no one, or another runtime
      ['create', spec({ tap: 'eth0' })],
      ['create', spec({ hostname: 'a b;reboot' })],
      ['create', spec({ resources: { ...RESOURCES, vcpus: 0 } })],
      ['create', spec({ resources: { ...RESOURCES, limits: { memory_mib: 1e12 } } })],
      ['create', spec({ kernelArgs: 'init=/bin/sh' })],
      ['create', null],
      ['destroy', { runtimeId: id.toUpperCase() }],
      ['destroy', { runtimeId: `${id}/..` }],
      ['readConsoleLog', { runtimeId: id, maxBytes: 2 ** 40 }],
      ['readCheckpointFile', { checkpointId: id, file: '../state', stream: 1 }],
      ['deleteCheckpoint', { checkpointId: '*' }],
      ['guestCall', { runtimeId: id, method: 'giveIdentity', args: { hostname: 'x', setClock: true } }],
      ['guestCall', { runtimeId: id, method: 'shutdown', args: {} }],
      ['guestCall', { runtimeId: id, method: 'adopt', args: {} }],
      ['guestCall', { runtimeId: id, method: 'readFile', args: { path: '/etc/shadow' } }],
      ['guestStream', { runtimeId: id, method: 'listProcesses', args: {}, stream: 1 }],
      ['guestStream', { runtimeId: id, method: 'constructor', args: {}, stream: 1 }],
      ['guestCall', { runtimeId: id, method: '__proto__', args: {} }],
    ];
    for (const [method, args] of hostile) {
      const outcome = await r.api.call(method, args).then(
        () => 'done',
        (err: unknown) => err,
      );
      assert.ok(outcome !== 'done', `${method} ${JSON.stringify(args)} was done`);
      assert.equal((outcome as { detail?: { code?: string } }).detail?.code, 'invalid_argument', `${method} ${JSON.stringify(args)}: ${String(outcome)}`);
    }
    await assert.rejects(r.remote.destroy('not-a-uuid'), refusedAsInvalid);
    await assert.rejects(r.api.call('spawnShell', {}), /no method 'spawnShell'/, 'a method outside the list has no handler');
    assert.deepEqual(r.calls, [], 'nothing reached the driver or the gateway');
  } finally {
    r.close();
  }
});

test("the driver's errors come back as the API's, code, status and retry time kept; anything else is unavailable", async () => {
  const r = await rig({
    pause: () => {
      throw failedPrecondition('the runtime is not running');
    },
    resume: () => {
      throw new VesselError('unavailable', 'the host is out of memory', { retryAfterSecs: 7 });
    },
    suspend: () => {
      throw new Error('ENOSPC: no space left on device');
    },
  });
  try {
    const id = randomUUID();
    await assert.rejects(r.remote.pause(id), (err: unknown) => err instanceof VesselError && err.code === 'failed_precondition' && err.httpStatus === 409 && err.message === 'the runtime is not running');
    await assert.rejects(r.remote.resume(id), (err: unknown) => err instanceof VesselError && err.code === 'unavailable' && err.retryAfterSecs === 7);
    await assert.rejects(r.remote.suspend(id), (err: unknown) => err instanceof VesselError && err.code === 'unavailable' && /host process failed: ENOSPC/.test(err.message));
  } finally {
    r.close();
  }
});

test('a guest stream relayed through the host keeps its chunks with their meta, its end value, and the API\'s cancel', async () => {
  const r = await rig();
  try {
    const runtimeId = randomUUID();
    const seen: { input: Buffer[]; end?: unknown; cancelled: boolean } = { input: [], cancelled: false };
    let agentStream!: LinkStream;
    r.agentLink.handle('spawnProcess', async (args) => {
      const a = args as { runtimeId: string; spec: unknown; stream: number };
      assert.equal(a.runtimeId, runtimeId);
      agentStream = r.agentLink.acceptStream(a.stream, { receives: true, sends: true });
      agentStream.onCancel(() => (seen.cancelled = true));
      void (async () => {
        for await (const chunk of agentStream) seen.input.push(chunk.data);
        seen.end = await agentStream.result;
      })();
      await agentStream.write(Buffer.from('out-1'), [0, 0, 0]);
      await agentStream.write(Buffer.alloc(100_000, 7), [1, 5, 0]);
      await agentStream.write(Buffer.alloc(600_000, 8)); // over two windows: credit must flow back through the host
      return { state: 'started' };
    });
    const agent = new RelayedAgent(r.api, runtimeId);
    const { stream, reply } = await agent.withStream('spawnProcess', { spec: { command: 'cat' } }, { receives: true, sends: true });
    assert.deepEqual(await reply, { state: 'started' });
    const out: Array<[unknown, number]> = [];
    for await (const chunk of stream) {
      out.push([chunk.meta, chunk.data.length]);
      if (out.reduce((n, [, len]) => n + len, 0) >= 700_005) break;
    }
    assert.deepEqual(out.slice(0, 2), [[[0, 0, 0], 5], [[1, 5, 0], 100_000]], 'each chunk keeps its meta');
    assert.equal(out.reduce((n, [, len]) => n + len, 0), 700_005);
    await stream.write(Buffer.from('stdin bytes'));
    stream.end('eof');
    for (let i = 0; i < 100 && seen.end === undefined; i++) await new Promise((res) => setTimeout(res, 10));
    assert.equal(Buffer.concat(seen.input).toString(), 'stdin bytes');
    assert.equal(seen.end, 'eof', 'the end value reaches the agent as the API sent it');
    stream.cancel();
    for (let i = 0; i < 100 && !seen.cancelled; i++) await new Promise((res) => setTimeout(res, 10));
    assert.ok(seen.cancelled, "the API's cancel reaches the agent (a detach)");
  } finally {
    r.close();
  }
});

/** The host's side writes template disks into a real directory: what the API streams is checked where the file is written. */
async function diskRig(standing: string | null = null) {
  const dataDir = mkdtempSync(join(tmpdir(), 'vessel-template-disks-'));
  const files = new TemplateDiskFiles(dataDir, () => standing);
  const r = await rig({
    importTemplateDisk: (id, size, chunks) => files.importDisk(id as string, size as number, chunks as AsyncIterable<DiskChunk>),
    deleteTemplateDisk: (id) => files.deleteDisk(id as string),
  });
  return { ...r, files, close: () => (r.close(), rmSync(dataDir, { recursive: true, force: true })) };
}

async function* chunksOf(...chunks: Array<{ offset: unknown; data: Buffer }>): AsyncGenerator<DiskChunk> {
  for (const c of chunks) yield c as DiskChunk;
}
const KiB4 = (byte: number) => Buffer.alloc(4096, byte);

test("a template's disk streamed to the host is written where the host says, 0600, its holes left as zeros; a delete removes it", async () => {
  const r = await diskRig();
  try {
    const id = randomUUID();
    await r.remote.importTemplateDisk(id, 4 * 4096, chunksOf({ offset: 0, data: KiB4(1) }, { offset: 2 * 4096, data: Buffer.concat([KiB4(2), KiB4(3)]) }));
    const file = r.files.diskFile(id);
    assert.equal(file, join(r.files.dir, id, 'root.img'));
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.deepEqual(readFileSync(file), Buffer.concat([KiB4(1), KiB4(0), KiB4(2), KiB4(3)]));
    await assert.rejects(r.remote.importTemplateDisk(id, 4096, chunksOf()), (err: unknown) => err instanceof VesselError && err.code === 'failed_precondition' && /has a disk/.test(err.message));
    assert.deepEqual(readFileSync(file).length, 4 * 4096, 'a second import leaves the first disk as it was');
    await r.remote.deleteTemplateDisk(id);
    assert.equal(existsSync(join(r.files.dir, id)), false);
    await r.remote.deleteTemplateDisk(id); // idempotent
  } finally {
    r.close();
  }
});

test('a hostile template disk stream is refused, and leaves nothing on the host', async () => {
  const r = await diskRig();
  try {
    const refusedArgs: unknown[] = [
      { templateId: '../../etc', sizeBytes: 4096, stream: 1 },
      { templateId: randomUUID(), sizeBytes: 4097, stream: 1 },
      { templateId: randomUUID(), sizeBytes: 0, stream: 1 },
      { templateId: randomUUID(), sizeBytes: 2 ** 50, stream: 1 },
      { templateId: randomUUID(), sizeBytes: 4096, stream: 1, path: '/etc/passwd' },
    ];
    for (const args of refusedArgs) {
      const err = await r.api.call('importTemplateDisk', args).then(() => null, (e: unknown) => e);
      assert.equal((err as { detail?: { code?: string } } | null)?.detail?.code, 'invalid_argument', JSON.stringify(args));
    }
    await assert.rejects(r.api.call('deleteTemplateDisk', { templateId: '..' }), /the host refused/);
    const hostile: Array<[string, Array<{ offset: unknown; data: Buffer }>]> = [
      ['out of order', [{ offset: 4096, data: KiB4(1) }, { offset: 0, data: KiB4(2) }]],
      ['overlapping', [{ offset: 0, data: Buffer.concat([KiB4(1), KiB4(1)]) }, { offset: 4096, data: KiB4(2) }]],
      ['past the end', [{ offset: 3 * 4096, data: Buffer.concat([KiB4(1), KiB4(1)]) }]],
      ['far past the end', [{ offset: 2 ** 52, data: KiB4(1) }]],
      ['negative', [{ offset: -4096, data: KiB4(1) }]],
      ['not a number', [{ offset: '0', data: KiB4(1) }]],
      ['fractional', [{ offset: 0.5, data: KiB4(1) }]],
      ['no offset', [{ offset: undefined, data: KiB4(1) }]],
      ['empty', [{ offset: 0, data: Buffer.alloc(0) }]],
    ];
    for (const [what, chunks] of hostile) {
      await assert.rejects(r.remote.importTemplateDisk(randomUUID(), 4 * 4096, chunksOf(...chunks)), (err: unknown) => err instanceof VesselError && err.code === 'invalid_argument', what);
      assert.deepEqual(readdirSync(r.files.dir), [], `${what}: nothing is left`);
    }
  } finally {
    r.close();
  }
});

test("a template's disk that runtimes or checkpoints stand on is not deleted", async () => {
  const r = await diskRig('1 runtime');
  try {
    const id = randomUUID();
    await r.remote.importTemplateDisk(id, 4096, chunksOf({ offset: 0, data: KiB4(7) }));
    await assert.rejects(r.remote.deleteTemplateDisk(id), (err: unknown) => err instanceof VesselError && err.code === 'failed_precondition' && /in use by 1 runtime;/.test(err.message));
    assert.ok(existsSync(r.files.diskFile(id)));
  } finally {
    r.close();
  }
});
