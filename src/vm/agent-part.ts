/**
 * The agent connections' process, from the service's side (docs/security.md, "Processes"): it
 * starts agent/agent-process.ts as the `vessel-agent` user, and gives it each VM's connection to
 * vessel-agent when one is needed. The agent sockets stay in root's runtime directories: the
 * service connects (connectUnix), sends the connected descriptor over a socket pair that is the
 * process's descriptor 4 (SCM_RIGHTS, with the runtime and the connection's generation), closes
 * its own copy, and asks the process to `adopt` it, which answers once the agent's HELLO_ACK has
 * come. So the process gets a connection for a runtime only when the service gives it one, and
 * can open nothing itself.
 *
 * The process asks the service for nothing: its one note, `closed`, only makes the next request
 * for that runtime connect again. When it dies, every connection goes with it (the guests'
 * processes run on: the agent keeps them), calls in flight fail as unavailable, and the next
 * request for each runtime hands the new process a new connection.
 */
import { closeSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ChildPart } from '../platform/child-part.js';
import { LinkError, type LinkStream, type PartLink } from '../platform/part-link.js';
import type { PartUser } from '../platform/part-process.js';
import { ensureSystemUser } from '../platform/system-users.js';
import type { AgentPartSettings } from './agent/agent-part-protocol.js';
import { partFailure } from './agent-replies.js';
import { connectUnix, sendWithFds, socketPair } from './vm-ops.js';

/** The user the agent connections run as. */
export const AGENT_USER = 'vessel-agent';
/**
 * The process's heap: every VM's stream windows (256 KiB each way per stream, and the agent's
 * own per stream), and a directory listing at a time (up to 16 MiB of names). A guest that
 * makes it grow past this ends the process, which is started again.
 */
const AGENT_HEAP_MIB = 1024;
/** How long a request waits for a connection to a running VM's agent (as QemuVm.agent() did). */
export const DEFAULT_CONNECT_MS = 5000;

export interface AgentPartOptions {
  logLevel?: string;
  log: { info(o: object, m: string): void; warn(o: object, m: string): void; error(o: object, m: string): void };
}

interface Connection {
  link: PartLink;
  generation: number;
}

export class AgentPart {
  readonly #part: ChildPart;
  /** The service's end of the handover pair of each running process. */
  readonly #handover = new Map<PartLink, number>();
  /** The end made for the process being spawned, until its link exists. */
  #spawnedHandover: number | null = null;
  readonly #connections = new Map<string, Connection>();
  readonly #connecting = new Map<string, Promise<PartLink>>();
  /** The last generation the process said has ended, per runtime being handed over or held. */
  readonly #ended = new Map<string, number>();
  #generation = 0;
  #user: PartUser | null = null;

  constructor(opts: AgentPartOptions) {
    this.#part = new ChildPart({
      name: 'agent',
      entry: fileURLToPath(new URL('./agent/agent-process.js', import.meta.url)),
      maxHeapMib: AGENT_HEAP_MIB,
      settings: (): AgentPartSettings => ({ user: this.#user!, logLevel: opts.logLevel ?? 'info' }),
      descriptors: () => {
        const [ours, theirs] = socketPair();
        this.#spawnedHandover = ours;
        return [theirs];
      },
      handlers: (link) => this.#answer(link),
      // A new process holds no connection: each runtime's next request gives it one.
      onStart: async () => undefined,
      log: opts.log,
    });
  }

  /** The process's pid, for tests and benches; null while it is started again. */
  get pid(): number | null {
    return this.#part.pid;
  }

  async start(): Promise<void> {
    this.#user = ensureSystemUser(AGENT_USER);
    await this.#part.start();
  }

  async close(): Promise<void> {
    await this.#part.close();
  }

  /** The per-VM handle QemuVm uses. */
  runtime(runtimeId: string, socketPath: string, vmExited: () => boolean): RuntimeAgent {
    return new RuntimeAgent(this, runtimeId, socketPath, vmExited);
  }

  /**
   * The link of the process that holds a live connection to the runtime's agent, handing it one
   * first when it holds none (one handover at a time per runtime). Rejects when the agent does
   * not answer within `timeoutMs`, or the socket cannot be reached.
   */
  connected(runtimeId: string, socketPath: string, timeoutMs: number): Promise<PartLink> {
    const current = this.#connections.get(runtimeId);
    if (current !== undefined && !current.link.closed) return Promise.resolve(current.link);
    let connecting = this.#connecting.get(runtimeId);
    if (connecting === undefined) {
      connecting = this.#handOver(runtimeId, socketPath, timeoutMs).finally(() => this.#connecting.delete(runtimeId));
      this.#connecting.set(runtimeId, connecting);
    }
    return connecting;
  }

  /** The VM is gone (or the service lets go of it): the process drops its connection. */
  drop(runtimeId: string): void {
    const current = this.#connections.get(runtimeId);
    this.#connections.delete(runtimeId);
    this.#ended.delete(runtimeId);
    if (current !== undefined && !current.link.closed) current.link.notify('drop', { runtimeId });
  }

  /**
   * The process says it holds no connection to the runtime on `link` (a `closed` note may be
   * lost in a race, or the process restarted): the next request hands it a new one.
   */
  forget(runtimeId: string, link: PartLink): void {
    if (this.#connections.get(runtimeId)?.link === link) this.#connections.delete(runtimeId);
  }

  async #handOver(runtimeId: string, socketPath: string, timeoutMs: number): Promise<PartLink> {
    const link = await this.#part.ready();
    const handover = link === null ? undefined : this.#handover.get(link);
    if (link === null || link.closed || handover === undefined) throw new Error('the agent process is being started again');
    let fd: number;
    try {
      fd = connectUnix(socketPath);
    } catch (err) {
      throw new Error(`cannot connect to the guest agent's socket: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    const generation = ++this.#generation;
    try {
      sendWithFds(handover, Buffer.from(`${runtimeId}\n${generation}`), [fd]);
    } finally {
      closeSync(fd);
    }
    await link.call('adopt', { runtimeId, generation, timeoutMs });
    // A guest can end the connection as soon as its handshake is done: the process's `closed`
    // note then comes before its answer to `adopt`.
    if ((this.#ended.get(runtimeId) ?? 0) >= generation) throw new Error('the guest agent ended the connection as it was made');
    this.#connections.set(runtimeId, { link, generation });
    return link;
  }

  /** The process may only say that a connection it was given has ended. */
  #answer(link: PartLink): void {
    if (this.#spawnedHandover !== null) this.#handover.set(link, this.#spawnedHandover);
    this.#spawnedHandover = null;
    link.onClose(() => {
      const fd = this.#handover.get(link);
      this.#handover.delete(link);
      if (fd !== undefined) closeSync(fd);
    });
    link.handle('closed', (args) => {
      const { runtimeId, generation } = (typeof args === 'object' && args !== null ? args : {}) as { runtimeId?: unknown; generation?: unknown };
      if (typeof runtimeId !== 'string' || typeof generation !== 'number') return null;
      const current = this.#connections.get(runtimeId);
      if (current?.link === link && current.generation === generation) this.#connections.delete(runtimeId);
      // Only for runtimes the service knows, so the process cannot grow the map.
      if (current !== undefined || this.#connecting.has(runtimeId)) this.#ended.set(runtimeId, Math.max(this.#ended.get(runtimeId) ?? 0, generation));
      return null;
    });
  }
}

/**
 * What RemoteGuestAgent needs of one VM's agent: calls and streams of the agent process's
 * protocol, named by the runtime. RuntimeAgent is it in the process that holds the agent part;
 * the API's process reaches the same through the privileged host process (src/host).
 */
export interface AgentChannel {
  readonly runtimeId: string;
  call<T = unknown>(method: string, args?: Record<string, unknown>): Promise<T>;
  withStream(method: string, args: Record<string, unknown>, directions: { receives: boolean; sends: boolean }): Promise<{ stream: LinkStream; reply: Promise<unknown> }>;
  /** Whether the VM's process has exited: a failure then says the VM stopped. */
  vmExited(): boolean;
}

/**
 * One VM's agent, through the agent process: calls and streams named by the runtime, each
 * connecting first when the process holds no connection, each failure as the API reports it
 * (agent-replies.ts).
 */
export class RuntimeAgent implements AgentChannel {
  constructor(
    private readonly part: AgentPart,
    readonly runtimeId: string,
    private readonly socketPath: string,
    readonly vmExited: () => boolean,
  ) {}

  /** Makes sure the process holds a connection the agent has answered (a HELLO_ACK), within `timeoutMs`. */
  async connect(timeoutMs = DEFAULT_CONNECT_MS): Promise<PartLink> {
    return this.part.connected(this.runtimeId, this.socketPath, timeoutMs);
  }

  /** A call about this runtime; its failure as the API's error. */
  async call<T = unknown>(method: string, args: Record<string, unknown> = {}, connectMs = DEFAULT_CONNECT_MS): Promise<T> {
    let link: PartLink | null = null;
    try {
      link = await this.connect(connectMs);
      return (await link.call(method, { ...args, runtimeId: this.runtimeId })) as T;
    } catch (err) {
      throw this.#failure(err, link);
    }
  }

  #failure(err: unknown, link: PartLink | null): Error {
    if (link !== null && err instanceof LinkError && (err.detail as { kind?: unknown } | null)?.kind === 'disconnected') this.part.forget(this.runtimeId, link);
    return partFailure(err, this.vmExited());
  }

  /**
   * A call that names a stream of ours, opened before it goes out (so nothing the process sends
   * on it can come before the stream exists). The stream is closed when the call fails.
   */
  async withStream(method: string, args: Record<string, unknown>, directions: { receives: boolean; sends: boolean }): Promise<{ stream: LinkStream; reply: Promise<unknown> }> {
    let link: PartLink;
    try {
      link = await this.connect();
    } catch (err) {
      throw partFailure(err, this.vmExited());
    }
    let stream: LinkStream;
    try {
      stream = link.openStream(directions);
    } catch (err) {
      throw partFailure(err, this.vmExited());
    }
    const reply = link.call(method, { ...args, runtimeId: this.runtimeId, stream: stream.id });
    reply.catch(() => stream.close());
    return { stream, reply: reply.catch((err: unknown) => Promise.reject(this.#failure(err, link))) };
  }

  /** The VM is gone: the process lets go of its connection. */
  drop(): void {
    this.part.drop(this.runtimeId);
  }
}
