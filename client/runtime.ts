/**
 * One runtime: its lifecycle, commands (buffered and streamed), processes, files, a terminal,
 * checkpoints and its secret injection rules. `info` is the Runtime object as last seen; every
 * call that answers with one updates it.
 */
import type { Checkpoint, CheckpointCreateRequest, ConsoleLog, ExecRequest, ExecResult, ExecStreamRequest, RuntimeInfo, RuntimePatchRequest } from './api-types.js';
import { CommandStream, type OutputHandlers } from './command-stream.js';
import { readConsoleLog, type ConsoleLogOptions } from './console-log.js';
import { Files } from './files.js';
import { commandEvents, execEnd, type ExecExit } from './output.js';
import { Processes } from './processes.js';
import { RuntimeRules } from './rules.js';
import { serverEvents } from './server-events.js';
import { Terminal, type DataListener, type ExitListener } from './terminal.js';
import type { CallOptions, Transport } from './transport.js';
import { createWebSocket, whenOpen } from './websocket.js';

export type ExecStream = CommandStream<ExecExit>;

export interface TerminalOptions extends CallOptions {
  rows?: number | undefined;
  cols?: number | undefined;
  /** Attach to this process (started with `pty`) instead of starting a login shell. */
  processId?: number | undefined;
  /** Listeners from the first byte on. */
  onData?: DataListener | undefined;
  onExit?: ExitListener | undefined;
}

type Lifecycle = 'start' | 'stop' | 'pause' | 'resume' | 'suspend';

export class Runtime {
  readonly #t: Transport;
  #info: RuntimeInfo;
  readonly processes: Processes;
  readonly files: Files;
  readonly rules: RuntimeRules;

  constructor(transport: Transport, info: RuntimeInfo) {
    this.#t = transport;
    this.#info = info;
    this.processes = new Processes(transport, info.id);
    this.files = new Files(transport, info.id);
    this.rules = new RuntimeRules(transport, info.id);
  }

  get id(): string {
    return this.#info.id;
  }

  get name(): string {
    return this.#info.display_name;
  }

  get status(): RuntimeInfo['status'] {
    return this.#info.status;
  }

  /** The Runtime object as the last answer showed it. */
  get info(): RuntimeInfo {
    return this.#info;
  }

  get labels(): RuntimeInfo['labels'] {
    return this.#info.labels;
  }

  /** Where each ingress port is reached from outside, as the service computes it. */
  get ingressUrls(): RuntimeInfo['ingress_urls'] {
    return this.#info.ingress_urls;
  }

  async refresh(options?: CallOptions): Promise<this> {
    return this.#update(await this.#t.call('idempotent', options, (signal) => this.#t.api.GET('/v1/runtimes/{runtime_id}', { params: { path: this.#path() }, signal })));
  }

  /** Changes the egress policy, memory, labels (replaced whole) or lifecycle settings (docs/api.md, "PATCH"). */
  async patch(body: RuntimePatchRequest, options?: CallOptions): Promise<this> {
    // The same patch twice leaves the same runtime.
    return this.#update(await this.#t.call('idempotent', options, (signal) => this.#t.api.PATCH('/v1/runtimes/{runtime_id}', { params: { path: this.#path() }, body, signal })));
  }

  start(options?: CallOptions): Promise<this> {
    return this.#lifecycle('start', options);
  }

  stop(options?: CallOptions): Promise<this> {
    return this.#lifecycle('stop', options);
  }

  pause(options?: CallOptions): Promise<this> {
    return this.#lifecycle('pause', options);
  }

  resume(options?: CallOptions): Promise<this> {
    return this.#lifecycle('resume', options);
  }

  /** Saves a running runtime (memory, devices, processes) to disk and ends its VM; resume() brings it back. */
  suspend(options?: CallOptions): Promise<this> {
    return this.#lifecycle('suspend', options);
  }

  /** Deletes the runtime, its VM, its disk and its rules, from any state. */
  async delete(options?: CallOptions): Promise<void> {
    await this.#t.call('idempotent', options, (signal) => this.#t.api.DELETE('/v1/runtimes/{runtime_id}', { params: { path: this.#path() }, signal }));
  }

  /**
   * Runs a command and answers when it ends, with its output. A string is run by /bin/sh -c; a
   * non-zero exit is a result, not an error.
   */
  exec(command: string | ExecRequest, options?: CallOptions): Promise<ExecResult> {
    const body = typeof command === 'string' ? { command } : command;
    return this.#t.call('not-idempotent', options, (signal) => this.#t.api.POST('/v1/runtimes/{runtime_id}/exec', { params: { path: this.#path() }, body, signal }));
  }

  /**
   * Runs a command and streams its output as it comes. Resolves once the command runs (a command
   * that cannot start is thrown here); then iterate the events, or wait() for the exit while the
   * handlers see the output. Closing the stream kills the command unless `background` is set,
   * in which case it runs on as a process (`stream.process.id`) whose output can be read again
   * from `stream.position`.
   */
  async execStream(command: string | ExecStreamRequest, options: CallOptions & OutputHandlers = {}): Promise<ExecStream> {
    const body = typeof command === 'string' ? { command } : command;
    const abort = new AbortController();
    const signal = options.signal === undefined ? abort.signal : AbortSignal.any([options.signal, abort.signal]);
    const answer = await this.#t.send('not-idempotent', { signal }, (s) =>
      this.#t.api.POST('/v1/runtimes/{runtime_id}/exec', { params: { path: this.#path() }, body, headers: { accept: 'text/event-stream' }, parseAs: 'stream', signal: s }),
    );
    const requestId = answer.response.headers.get('x-request-id') ?? undefined;
    return new CommandStream(commandEvents(serverEvents(answer.data as ReadableStream<Uint8Array>), execEnd, requestId), options, abort);
  }

  /** Captures memory and disk (beta). Answers in state `creating`; runtimes.fork() waits until it is ready. */
  checkpoint(body: CheckpointCreateRequest = {}, options?: CallOptions): Promise<Checkpoint> {
    return this.#t.call('not-idempotent', options, (signal) => this.#t.api.POST('/v1/runtimes/{runtime_id}/checkpoints', { params: { path: this.#path() }, body, signal }));
  }

  /** The end of its serial console (kernel and init boot messages), in any state: for a boot that failed. */
  consoleLog(options?: ConsoleLogOptions): Promise<ConsoleLog> {
    return readConsoleLog(this.#t, this.id, options);
  }

  /** Opens a terminal: a login shell, or an existing pty process. */
  async terminal(options: TerminalOptions = {}): Promise<Terminal> {
    const query = new URLSearchParams();
    if (options.rows !== undefined) query.set('rows', String(options.rows));
    if (options.cols !== undefined) query.set('cols', String(options.cols));
    if (options.processId !== undefined) query.set('process_id', String(options.processId));
    const url = `${this.#t.url}/v1/runtimes/${encodeURIComponent(this.id)}/terminal?${query}`;
    options.signal?.throwIfAborted();
    const socket = await createWebSocket(url, this.#t.token, this.#t.WebSocket);
    const terminal = new Terminal(socket);
    if (options.onData !== undefined) terminal.onData(options.onData);
    if (options.onExit !== undefined) terminal.onExit(options.onExit);
    await whenOpen(socket, options.signal);
    return terminal;
  }

  async #lifecycle(op: Lifecycle, options: CallOptions | undefined): Promise<this> {
    // Not idempotent: a second pause of a paused runtime is failed_precondition.
    return this.#update(await this.#t.call('not-idempotent', options, (signal) => this.#t.api.POST(`/v1/runtimes/{runtime_id}/${op}`, { params: { path: this.#path() }, signal })));
  }

  #path() {
    return { runtime_id: this.#info.id };
  }

  #update(info: RuntimeInfo): this {
    this.#info = info;
    return this;
  }
}
