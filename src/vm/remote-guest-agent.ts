/**
 * The core's GuestAgent port for one runtime's VM, answered by the agent's process
 * (agent/agent-process.ts) over its link: calls for one-shot requests, link streams for process
 * output and stdin, file and archive bytes, and directory listings. Every reply is checked
 * (agent-replies.ts); every failure is the API's error, or the runtime being unavailable.
 */
import { Readable } from 'node:stream';
import { posix } from 'node:path';
import type { GuestAgent } from '../core/ports.js';
import type { AttachRequest, GuestFileInfo, GuestFileStat, ProcessOutput, ProcessSpec, ProcessState, ProcessStream } from '../core/types.js';
import { readableOf } from '../platform/link-pipes.js';
import { LinkClosedError, LinkError, StreamClosedError, type LinkStream } from '../platform/part-link.js';
import type { AgentChannel } from './agent-part.js';
import { ListingCollector, fileStatOf, outputOf, partFailure, processListOf, processStateOf, startOf, writtenOf } from './agent-replies.js';
import { capped } from './guest-files.js';

/** Finds the runtime's VM at call time (throws failed_precondition when it has none). */
export type AgentOf = () => AgentChannel;

class RemoteProcessStream implements ProcessStream {
  readonly state: ProcessState;
  readonly start: { stdout: number; stderr: number };
  readonly done: Promise<ProcessState | null>;

  constructor(
    private readonly stream: LinkStream,
    reply: unknown,
    private readonly agent: AgentChannel,
  ) {
    const r = (typeof reply === 'object' && reply !== null ? reply : {}) as { state?: unknown; start?: unknown };
    this.state = processStateOf(r.state);
    this.start = startOf(r.start);
    // Detached (cancelled here), the stream ends with no state: null, as the agent's own stream does.
    this.done = stream.result.then(
      (v) => (v === null || v === undefined ? null : processStateOf(v)),
      (err: unknown) => Promise.reject(this.#failure(err)),
    );
    this.done.catch(() => undefined);
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ProcessOutput> {
    try {
      for await (const chunk of this.stream) yield outputOf(chunk.meta, chunk.data);
    } catch (err) {
      throw this.#failure(err);
    }
  }

  async write(data: Buffer): Promise<void> {
    try {
      await this.stream.write(data);
    } catch (err) {
      throw this.#failure(err);
    }
  }

  endInput(): void {
    this.stream.end('eof');
  }

  detach(): void {
    this.stream.close();
  }

  #failure(err: unknown): Error {
    if (!(err instanceof LinkError || err instanceof LinkClosedError || err instanceof StreamClosedError)) this.stream.close();
    return partFailure(err, this.agent.vmExited());
  }
}

export class RemoteGuestAgent implements GuestAgent {
  constructor(private readonly agentOf: AgentOf) {}

  async spawnProcess(spec: ProcessSpec): Promise<ProcessStream> {
    return this.#process('spawnProcess', { spec });
  }

  async attachProcess(processId: number, request: AttachRequest): Promise<ProcessStream> {
    return this.#process('attachProcess', { processId, request });
  }

  async listProcesses(): Promise<ProcessState[]> {
    const agent = this.agentOf();
    return this.#checked(agent, processListOf, await agent.call('listProcesses'));
  }

  async signalProcess(processId: number, signal: number, tree: boolean): Promise<void> {
    await this.agentOf().call('signalProcess', { processId, signal, tree });
  }

  async resizeTerminal(processId: number, rows: number, cols: number): Promise<void> {
    await this.agentOf().call('resizeTerminal', { processId, rows, cols });
  }

  async forgetProcess(processId: number): Promise<void> {
    await this.agentOf().call('forgetProcess', { processId });
  }

  readFile(path: string): Promise<Readable> {
    return this.#read('readFile', path);
  }

  writeFile(path: string, body: Readable, maxBytes: number): Promise<number> {
    return this.#write('writeFile', path, capped(body, maxBytes), maxBytes);
  }

  async listDir(path: string): Promise<GuestFileInfo[]> {
    const agent = this.agentOf();
    const { stream, reply } = await agent.withStream('listDir', { path }, { receives: true, sends: false });
    const listing = new ListingCollector(path.endsWith('/') ? path : `${path}/`);
    try {
      await reply;
      for await (const page of stream) listing.add(page.meta, page.data);
    } catch (err) {
      stream.close();
      throw partFailure(err, agent.vmExited());
    }
    return listing.entries;
  }

  async statPath(path: string, followSymlinks: boolean): Promise<GuestFileStat> {
    const agent = this.agentOf();
    const raw = await agent.call('statPath', { path, followSymlinks });
    return this.#checked(agent, (r) => fileStatOf(r, path, posix.basename(path) || '/'), raw);
  }

  async makeDir(path: string): Promise<void> {
    await this.agentOf().call('makeDir', { path });
  }

  async removePath(path: string, recursive: boolean): Promise<void> {
    await this.agentOf().call('removePath', { path, recursive });
  }

  readArchive(dir: string): Promise<Readable> {
    return this.#read('readArchive', dir);
  }

  writeArchive(dir: string, body: Readable, maxBytes: number): Promise<number> {
    return this.#write('writeArchive', dir, capped(body, maxBytes, 'archive'), maxBytes);
  }

  async #process(method: 'spawnProcess' | 'attachProcess', args: Record<string, unknown>): Promise<ProcessStream> {
    const agent = this.agentOf();
    const { stream, reply } = await agent.withStream(method, args, { receives: true, sends: true });
    const answer = await reply;
    try {
      return new RemoteProcessStream(stream, answer, agent);
    } catch (err) {
      stream.close();
      throw partFailure(err, agent.vmExited());
    }
  }

  /** Resolves once the process has the bytes' source open (a missing file is an error status, as before). */
  async #read(method: 'readFile' | 'readArchive', path: string): Promise<Readable> {
    const agent = this.agentOf();
    const { stream, reply } = await agent.withStream(method, { path }, { receives: true, sends: false });
    await reply;
    return readableOf(stream, (err) => partFailure(err, agent.vmExited()));
  }

  /**
   * Sends the body (already capped: over `maxBytes` it fails with 413 here, as before) while the
   * process writes it to the guest. A body that fails is the call's failure; the process stops
   * reading when its write fails, and the rest of the body is left unread.
   */
  async #write(method: 'writeFile' | 'writeArchive', path: string, body: AsyncIterable<Buffer>, maxBytes: number): Promise<number> {
    const agent = this.agentOf();
    const { stream, reply } = await agent.withStream(method, { path, maxBytes }, { receives: false, sends: true });
    let bodyFailure: unknown = null;
    const sending = (async () => {
      try {
        for await (const chunk of body) await stream.write(chunk);
        stream.end();
      } catch (err) {
        if (err instanceof StreamClosedError || err instanceof LinkClosedError) return; // the process stopped reading: its reply says why
        bodyFailure = err;
        stream.fail(new Error('the body could not be read'));
      }
    })();
    void sending;
    try {
      return this.#checked(agent, (n) => writtenOf(n, maxBytes), await reply);
    } catch (err) {
      // A body that failed did so before the process could answer (its failure is sent first);
      // a refusal of the guest's is not kept waiting for a slow client's body.
      throw bodyFailure ?? err;
    }
  }

  #checked<T>(agent: AgentChannel, check: (raw: unknown) => T, raw: unknown): T {
    try {
      return check(raw);
    } catch (err) {
      throw partFailure(err, agent.vmExited());
    }
  }
}
