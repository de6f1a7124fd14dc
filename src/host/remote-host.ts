/**
 * The API process's side of its link to the privileged host process: the core's VM ports
 * (Machines, CheckpointFiles, GuestAgents) and its NetworkGateway, each call sent to the host
 * (host-server.ts), each failure the API's error again. Guest calls go through the host to the
 * agent's process, and come back checked here (remote-guest-agent.ts, agent-replies.ts) as they
 * did when the service held the agent part itself.
 */
import type { Readable } from 'node:stream';
import type { ConsoleLog, DiskChunk, EgressSubject, GuestAgent, LiveState, NetworkGateway, RemoteCheckpoint, TemplateDisks, VmDriver, VmSpec } from '../core/ports.js';
import type { Resources } from '../core/types.js';
import { readableOf, sendAll } from '../platform/link-pipes.js';
import type { LinkStream, PartLink } from '../platform/part-link.js';
import type { AgentChannel } from '../vm/agent-part.js';
import { RemoteGuestAgent } from '../vm/remote-guest-agent.js';
import { fromLinkError, toLinkError, type HostCall, type HostFacts } from './host-calls.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/** A guest's agent, reached through the host process: its failures come back as the API's errors. */
export class RelayedAgent implements AgentChannel {
  constructor(
    private readonly link: PartLink,
    readonly runtimeId: string,
  ) {}

  async call<T = unknown>(method: string, args: Record<string, unknown> = {}): Promise<T> {
    return (await this.link.call('guestCall', { runtimeId: this.runtimeId, method, args }).catch((err: unknown) => Promise.reject(fromLinkError(err)))) as T;
  }

  async withStream(method: string, args: Record<string, unknown>, directions: { receives: boolean; sends: boolean }): Promise<{ stream: LinkStream; reply: Promise<unknown> }> {
    let stream: LinkStream;
    try {
      stream = this.link.openStream(directions);
    } catch (err) {
      throw fromLinkError(err);
    }
    const reply = this.link.call('guestStream', { runtimeId: this.runtimeId, method, args, stream: stream.id });
    reply.catch(() => stream.close());
    return { stream, reply: reply.catch((err: unknown) => Promise.reject(fromLinkError(err))) };
  }

  /** The host maps a failure of a VM that stopped before it sends it on. */
  vmExited(): boolean {
    return false;
  }
}

export class RemoteHost implements VmDriver, NetworkGateway, TemplateDisks {
  readonly #exitListeners: Array<(runtimeId: string) => void> = [];
  readonly #imports = new Map<number, RemoteCheckpoint>();
  #nextImport = 1;

  constructor(
    private readonly link: PartLink,
    private readonly facts: HostFacts,
  ) {
    link.handle('unexpectedExit', (args) => {
      const runtimeId = (args as { runtimeId?: unknown } | null)?.runtimeId;
      if (typeof runtimeId === 'string' && UUID.test(runtimeId)) for (const l of this.#exitListeners) l(runtimeId);
      return null;
    });
    link.handle('openImportFile', (args) => this.#openImportFile(args));
  }

  async #call<T>(method: HostCall, args: unknown = null): Promise<T> {
    try {
      return (await this.link.call(method, args)) as T;
    } catch (err) {
      throw fromLinkError(err);
    }
  }

  // ---- Machines ----
  unavailableReason(): string | null {
    return this.facts.unavailableReason;
  }
  imageId(): string {
    return this.facts.imageId;
  }
  hostLimits(): { vcpus: number; memoryMib: number } {
    return this.facts.hostLimits;
  }
  createTemplate(checkpointId: string, resources: Resources): Promise<void> {
    return this.#call('createTemplate', { checkpointId, resources });
  }
  sweep(): Promise<void> {
    return this.#call('sweep');
  }
  create(spec: VmSpec): Promise<void> {
    return this.#call('create', spec);
  }
  createSpare(spec: VmSpec): Promise<void> {
    return this.#call('createSpare', spec);
  }
  start(spec: VmSpec): Promise<void> {
    return this.#call('start', spec);
  }
  pause(runtimeId: string): Promise<void> {
    return this.#call('pause', { runtimeId });
  }
  resume(runtimeId: string): Promise<void> {
    return this.#call('resume', { runtimeId });
  }
  suspend(runtimeId: string): Promise<void> {
    return this.#call('suspend', { runtimeId });
  }
  stop(runtimeId: string, deadlineMs: number): Promise<void> {
    return this.#call('stop', { runtimeId, deadlineMs });
  }
  destroy(runtimeId: string): Promise<void> {
    return this.#call('destroy', { runtimeId });
  }
  setMemoryTarget(runtimeId: string, mib: number): Promise<void> {
    return this.#call('setMemoryTarget', { runtimeId, mib });
  }
  reattach(runtimeId: string): Promise<LiveState> {
    return this.#call('reattach', { runtimeId });
  }
  readConsoleLog(runtimeId: string, maxBytes: number): Promise<ConsoleLog | null> {
    return this.#call('readConsoleLog', { runtimeId, maxBytes });
  }
  runtimeIds(): Promise<string[]> {
    return this.#call('runtimeIds');
  }
  onUnexpectedExit(listener: (runtimeId: string) => void): void {
    this.#exitListeners.push(listener);
  }

  // ---- GuestAgents ----
  guest(runtimeId: string): GuestAgent {
    const agent = new RelayedAgent(this.link, runtimeId);
    return new RemoteGuestAgent(() => agent);
  }

  // ---- CheckpointFiles ----
  checkpoint(runtimeId: string, checkpointId: string): Promise<{ bytes: number }> {
    return this.#call('checkpoint', { runtimeId, checkpointId });
  }
  captureDisk(runtimeId: string, checkpointId: string, shape: { memoryMib: number; vcpus: number }): Promise<void> {
    return this.#call('captureDisk', { runtimeId, checkpointId, shape });
  }
  adoptDisk(runtimeId: string, checkpointId: string): Promise<void> {
    return this.#call('adoptDisk', { runtimeId, checkpointId });
  }
  verifyCheckpoint(checkpointId: string): Promise<string | null> {
    return this.#call('verifyCheckpoint', { checkpointId });
  }
  deleteCheckpoint(checkpointId: string): Promise<void> {
    return this.#call('deleteCheckpoint', { checkpointId });
  }
  heldCheckpointIds(): Promise<string[]> {
    return this.#call('heldCheckpointIds');
  }
  orphanedLayerBytes(runtimeIds: string[], checkpointIds: string[]): Promise<number> {
    return this.#call('orphanedLayerBytes', { runtimeIds, checkpointIds });
  }
  describeCheckpoint(checkpointId: string): ReturnType<VmDriver['describeCheckpoint']> {
    return this.#call('describeCheckpoint', { checkpointId });
  }
  async readCheckpointFile(checkpointId: string, file: string): Promise<Readable> {
    const stream = this.link.openStream({ receives: true, sends: false });
    try {
      await this.#call('readCheckpointFile', { checkpointId, file, stream: stream.id });
    } catch (err) {
      stream.close();
      throw err;
    }
    return readableOf(stream, fromLinkError);
  }
  async importCheckpoint(checkpointId: string, source: RemoteCheckpoint, expected: { memoryMib: number; vcpus: number }): Promise<void> {
    const importId = this.#nextImport++;
    this.#imports.set(importId, source);
    try {
      await this.#call('importCheckpoint', { checkpointId, importId, description: source.description, expected });
    } finally {
      this.#imports.delete(importId);
    }
  }

  /** The host reads an import's file: its bytes, as the other host sends them, go to the host's stream. */
  async #openImportFile(args: unknown): Promise<null> {
    const { importId, file, stream } = (typeof args === 'object' && args !== null ? args : {}) as { importId?: unknown; file?: unknown; stream?: unknown };
    const source = typeof importId === 'number' ? this.#imports.get(importId) : undefined;
    if (source === undefined || typeof file !== 'string') throw new Error('no such import');
    const body = await source.open(file);
    sendAll(body, this.link.acceptStream(stream, { receives: false, sends: true }), toLinkError);
    return null;
  }

  // ---- TemplateDisks ----
  /** The gateway's CA certificate, which the guest kit adds to a template's bundle. */
  egressCaPem(): string {
    return this.facts.egressCaPem;
  }
  async importTemplateDisk(templateId: string, sizeBytes: number, chunks: AsyncIterable<DiskChunk>): Promise<void> {
    const stream = this.link.openStream({ receives: false, sends: true });
    const reply = this.#call<void>('importTemplateDisk', { templateId, sizeBytes, stream: stream.id });
    // A refusal ends the writes too (they may be waiting for credit the host never grants).
    reply.catch(() => stream.close());
    try {
      for await (const chunk of chunks) await stream.write(chunk.data, { offset: chunk.offset });
      stream.end();
    } catch (err) {
      // The host's answer says why it stopped taking chunks; the write's own failure says less.
      await reply;
      throw err;
    }
    await reply;
  }
  deleteTemplateDisk(templateId: string): Promise<void> {
    return this.#call('deleteTemplateDisk', { templateId });
  }

  // ---- NetworkGateway ----
  attach(subject: EgressSubject): Promise<string> {
    return this.#call('attach', subject);
  }
  update(subject: EgressSubject): Promise<void> {
    return this.#call('update', subject);
  }
  detach(runtimeId: string): Promise<void> {
    return this.#call('detach', { runtimeId });
  }
  restore(subjects: EgressSubject[]): Promise<void> {
    return this.#call('restore', subjects);
  }

  /** The VMs and the network are the host's: they run on after the API's process ends. */
  async close(): Promise<void> {}
}
