/**
 * The agent's process (agent-part.ts starts it): the host's side of every VM's vessel-agent
 * channel, as the `vessel-agent` user with no capabilities. It parses every frame guests send
 * (frames.ts, messages.ts, agent-client.ts) and answers the GuestAgent port's calls for the
 * service (guest-processes.ts, guest-files.ts, guest-directories.ts), so a guest that finds a bug
 * there, or exhausts its heap, costs this process, which the service starts again.
 *
 * It opens nothing itself: the agent sockets are root's, in root's runtime directories. The
 * service connects to one and hands the connected descriptor over its end of a socket pair (our
 * descriptor 4, SCM_RIGHTS), naming the runtime and the connection's generation in the same
 * message; the `adopt` call that follows says which one to take. It holds no key, no token and
 * no path of the host's.
 */
import { closeSync } from 'node:fs';
import { Socket } from 'node:net';
import { Readable } from 'node:stream';
import pino from 'pino';
import { VesselError } from '../../core/errors.js';
import type { AttachRequest, ProcessSpec, ProcessState, ProcessStream } from '../../core/types.js';
import { sendAll } from '../../platform/link-pipes.js';
import type { LinkStream, PartLink } from '../../platform/part-link.js';
import { LinkError } from '../../platform/part-link.js';
import { dropPrivileges, runPart } from '../../platform/part-process.js';
import { listGuestDir, makeGuestDir, readGuestArchive, removeGuestPath, statGuestPath, writeGuestArchive } from '../guest-directories.js';
import { readGuestFile, writeGuestFile } from '../guest-files.js';
import { giveIdentity, syncClock } from '../guest-identity.js';
import { attachProcess, listProcesses, onProcess, spawnProcess } from '../guest-processes.js';
import { recvWithFds } from '../vm-ops.js';
import { AgentClient, AgentClosedError, AgentError, AgentProtocolError } from './agent-client.js';
import { LISTING_PAGE_BYTES, type AgentPartSettings, type ErrorDetail, type ListingEntry, type OutputMeta } from './agent-part-protocol.js';

/** The descriptor the service hands agent connections over. */
const HANDOVER_FD = 4;
/** The data that goes with a descriptor: `<runtime id>\n<generation>`. */
const MAX_HANDOVER_BYTES = 512;

interface Connection {
  client: AgentClient;
  generation: number;
}

const connections = new Map<string, Connection>();
let log: pino.Logger = pino({ level: 'info' });

const runtimeOf = (args: unknown): string => {
  const id = (args as { runtimeId?: unknown } | null)?.runtimeId;
  if (typeof id !== 'string' || id.length === 0) throw new Error('runtimeId must be a string');
  return id;
};

/** A call for a runtime this process holds no open connection to (guest-*.ts pass it on as it is). */
class NoConnection extends AgentClosedError {}

/** The runtime's live connection, as guest-*.ts take it. */
const agentOf =
  (runtimeId: string) =>
  async (): Promise<AgentClient> => {
    const c = connections.get(runtimeId);
    if (c === undefined || c.client.closed) throw new NoConnection('the agent process holds no connection to this runtime');
    return c.client;
  };

/** What crosses the link for a failure: the API's error as it is, anything else by its kind. */
function linkError(err: unknown): LinkError {
  const message = err instanceof Error ? err.message : String(err);
  let detail: ErrorDetail;
  if (err instanceof VesselError) detail = { kind: 'vessel', code: err.code, httpStatus: err.httpStatus };
  else if (err instanceof AgentError) detail = { kind: 'refused' };
  else if (err instanceof NoConnection) detail = { kind: 'disconnected' };
  else detail = { kind: 'transport' };
  return new LinkError(message, detail);
}

/** Runs a handler, its failure as a LinkError. */
const answering =
  <A>(work: (args: A) => Promise<unknown>) =>
  async (args: unknown): Promise<unknown> => {
    try {
      return (await work(args as A)) ?? null;
    } catch (err) {
      throw linkError(err);
    }
  };

/** Takes the descriptor the service sent for this `adopt`, and makes it a client once the agent answers. */
async function adopt(link: PartLink, args: { runtimeId: string; generation: number; timeoutMs: number }): Promise<null> {
  const runtimeId = runtimeOf(args);
  const message = recvWithFds(HANDOVER_FD, MAX_HANDOVER_BYTES);
  const fd = message.fds[0];
  if (fd === undefined) throw new Error('no descriptor came with the handover');
  if (message.data.toString('utf8') !== `${runtimeId}\n${args.generation}` || message.truncated) {
    closeSync(fd);
    throw new Error('the descriptor handed over is not the one named');
  }
  const client = await AgentClient.over(new Socket({ fd, readable: true, writable: true }), { timeoutMs: args.timeoutMs });
  const previous = connections.get(runtimeId);
  if (previous !== undefined && previous.generation > args.generation) {
    client.close();
    return null;
  }
  previous?.client.close();
  connections.set(runtimeId, { client, generation: args.generation });
  client.onClose((err) => {
    if (connections.get(runtimeId)?.client === client) connections.delete(runtimeId);
    if (err instanceof AgentProtocolError) log.warn({ runtimeId, err: err.message }, 'the guest broke its agent channel; it is reconnected on the next request');
    link.notify('closed', { runtimeId, generation: args.generation });
  });
  return null;
}

const outputMeta = (o: { channel: 'stdout' | 'stderr'; offset: number; lost: number }): OutputMeta => [o.channel === 'stdout' ? 0 : 1, o.offset, o.lost];

/**
 * A process's reader over a link stream: its output out (each chunk with its channel, offset and
 * loss), its end with the final state; stdin in, and its end (`eof`) closing the process's
 * stdin. The service's cancel detaches the reader; the process runs on in the guest.
 */
function serveProcess(ps: ProcessStream, stream: LinkStream): { state: ProcessState; start: { stdout: number; stderr: number } } {
  const input = (async () => {
    try {
      for await (const chunk of stream) await ps.write(chunk.data);
      if ((await stream.result) === 'eof') ps.endInput();
    } catch {
      // The process takes no more input (it has no stdin, or it is gone): the service's writes fail.
      stream.cancel();
    }
  })();
  // The service detaches as soon as its last write was sent (core/processes.ts writeStdin): what
  // it sent before, and the end of input, still go to the guest before this reader lets go of stdin.
  stream.onCancel(() => void input.finally(() => ps.detach()));
  void (async () => {
    try {
      for await (const out of ps) await stream.write(out.data, outputMeta(out));
      stream.end(await ps.done);
    } catch (err) {
      stream.fail(linkError(err));
    }
    stream.cancel();
  })();
  return { state: ps.state, start: ps.start };
}

/** The bytes the service sends on a stream, as the body guest-files.ts takes; the service's failure fails it. */
const bodyOf = (stream: LinkStream): Readable =>
  Readable.from(
    (async function* () {
      for await (const chunk of stream) yield chunk.data;
    })(),
  );

async function sendListing(runtimeId: string, args: { path: string; stream: number }, link: PartLink): Promise<null> {
  const entries = await listGuestDir(agentOf(runtimeId), args.path);
  const stream = link.acceptStream(args.stream, { receives: false, sends: true });
  let page: string[] = [];
  let bytes = 0;
  const flush = async () => {
    if (page.length > 0) await stream.write(Buffer.from(`[${page.join(',')}]`), page.length);
    page = [];
    bytes = 0;
  };
  for (const e of entries) {
    const entry = JSON.stringify([e.name, e.type, e.size_bytes, e.mode, e.modified_at] satisfies ListingEntry);
    const size = Buffer.byteLength(entry);
    if (bytes + size + 2 > LISTING_PAGE_BYTES) await flush();
    page.push(entry);
    bytes += size + 1;
  }
  await flush();
  stream.end();
  return null;
}

function register(link: PartLink): void {
  link.handle('adopt', (args) => adopt(link, args as { runtimeId: string; generation: number; timeoutMs: number }));
  link.handle('drop', (args) => {
    const runtimeId = runtimeOf(args);
    connections.get(runtimeId)?.client.close();
    connections.delete(runtimeId);
    return null;
  });
  type R = { runtimeId: string };
  const on = <A extends R>(method: string, work: (agent: () => Promise<AgentClient>, args: A) => Promise<unknown>) =>
    link.handle(method, answering<A>((args) => work(agentOf(runtimeOf(args)), args)));

  // What the driver needs of the guest.
  on<R & { hostname: string; setClock: boolean }>('giveIdentity', async (agent, a) => giveIdentity(await agent(), a.hostname, a.setClock));
  on<R>('syncClock', async (agent) => syncClock(await agent()));
  on<R & { timeoutMs: number }>('shutdown', async (agent, a) => (await agent()).shutdown({ timeoutMs: a.timeoutMs }));
  on<R>('ping', async (agent) => (await agent()).ping());

  // The GuestAgent port.
  on<R & { spec: ProcessSpec; stream: number }>('spawnProcess', async (agent, a) => serveProcess(await spawnProcess(agent, a.spec), link.acceptStream(a.stream, { receives: true, sends: true })));
  on<R & { processId: number; request: AttachRequest; stream: number }>('attachProcess', async (agent, a) =>
    serveProcess(await attachProcess(agent, a.processId, a.request), link.acceptStream(a.stream, { receives: true, sends: true })),
  );
  on<R>('listProcesses', (agent) => listProcesses(agent));
  on<R & { processId: number; signal: number; tree: boolean }>('signalProcess', (agent, a) => onProcess(agent, a.processId, (ga) => ga.signal(a.processId, a.signal, { tree: a.tree })));
  on<R & { processId: number; rows: number; cols: number }>('resizeTerminal', (agent, a) => onProcess(agent, a.processId, (ga) => ga.resize(a.processId, a.rows, a.cols)));
  on<R & { processId: number }>('forgetProcess', (agent, a) => onProcess(agent, a.processId, (ga) => ga.forget(a.processId)));
  on<R & { path: string; stream: number }>('readFile', async (agent, a) => sendAll(await readGuestFile(agent, a.path), link.acceptStream(a.stream, { receives: false, sends: true }), linkError));
  on<R & { path: string; stream: number }>('readArchive', async (agent, a) => sendAll(await readGuestArchive(agent, a.path), link.acceptStream(a.stream, { receives: false, sends: true }), linkError));
  /** A body the service sends, written into the guest by `write`; whatever it did not take is cancelled. */
  const receiveBody = async (streamId: number, write: (body: ReturnType<typeof bodyOf>) => Promise<number>): Promise<number> => {
    const stream = link.acceptStream(streamId, { receives: true, sends: false });
    try {
      return await write(bodyOf(stream));
    } finally {
      stream.cancel();
    }
  };
  on<R & { path: string; maxBytes: number; stream: number }>('writeFile', (agent, a) => receiveBody(a.stream, (body) => writeGuestFile(agent, a.path, body, a.maxBytes)));
  on<R & { path: string; maxBytes: number; stream: number }>('writeArchive', (agent, a) => receiveBody(a.stream, (body) => writeGuestArchive(agent, a.path, body, a.maxBytes)));
  on<R & { path: string; stream: number }>('listDir', (_agent, a) => sendListing(a.runtimeId, a, link));
  on<R & { path: string; followSymlinks: boolean }>('statPath', (agent, a) => statGuestPath(agent, a.path, a.followSymlinks));
  on<R & { path: string }>('makeDir', (agent, a) => makeGuestDir(agent, a.path));
  on<R & { path: string; recursive: boolean }>('removePath', (agent, a) => removeGuestPath(agent, a.path, a.recursive));
}

runPart(register, async (raw) => {
  const settings = raw as AgentPartSettings;
  log = pino({ level: settings.logLevel, base: { part: 'agent', pid: process.pid } });
  // Nothing from a guest has been read yet: from here on this process is no one.
  dropPrivileges(settings.user);
});
