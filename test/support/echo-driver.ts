/**
 * The fake driver with processes, for tests of the HTTP facade's process routes: each process
 * writes its command line to stdout. One that takes input (stdin or a terminal) runs until its
 * stdin is closed or a signal ends it; any other exits 0 at once. Real processes are tested on
 * real VMs in test/vm.
 */
import { failedPrecondition, notFound } from '../../src/core/errors.js';
import type { AttachRequest, ProcessOutput, ProcessSpec, ProcessState, ProcessStream } from '../../src/core/types.js';
import { FakeDriver } from './fake-driver.js';

interface Kept {
  state: ProcessState;
  output: Buffer;
  /** Resolves once the process has ended. */
  ended: Promise<void>;
  end(status: 'exited' | 'signaled', code: number): void;
}

export class EchoDriver extends FakeDriver {
  readonly #processes = new Map<number, Kept>();
  #nextId = 1;

  override async spawnProcess(_runtimeId: string, spec: ProcessSpec): Promise<ProcessStream> {
    const output = Buffer.from(`${[spec.command, ...spec.args].join(' ')}\n`);
    const state: ProcessState = {
      id: this.#nextId++,
      pid: 100,
      command: [spec.command, ...spec.args].join(' ').slice(0, 256),
      status: 'running',
      exitCode: null,
      signal: null,
      pty: spec.pty !== null,
      stdinOpen: spec.stdin || spec.pty !== null,
      startedAt: new Date(),
      endedAt: null,
      stdout: { start: 0, end: output.length },
      stderr: { start: 0, end: 0 },
    };
    let ended!: () => void;
    const kept: Kept = {
      state,
      output,
      ended: new Promise((resolve) => (ended = resolve)),
      end: (status, code) => {
        if (state.status !== 'running') return;
        Object.assign(state, { status, stdinOpen: false, endedAt: new Date(), ...(status === 'exited' ? { exitCode: code } : { signal: code }) });
        ended();
      },
    };
    this.#processes.set(state.id, kept);
    const stream = this.#reader(kept, 0, true);
    if (!state.stdinOpen) kept.end('exited', 0);
    return stream;
  }

  override async attachProcess(_runtimeId: string, processId: number, request: AttachRequest): Promise<ProcessStream> {
    const kept = this.#find(processId);
    const from = request.from === 'oldest' ? 0 : request.from === 'end' ? kept.output.length : Math.min(request.from.stdout, kept.output.length);
    return this.#reader(kept, from, request.follow);
  }

  override async listProcesses(): Promise<ProcessState[]> {
    return [...this.#processes.values()].map((k) => ({ ...k.state }));
  }

  override async signalProcess(_runtimeId: string, processId: number, signal: number): Promise<void> {
    this.#find(processId).end('signaled', signal);
  }

  override async resizeTerminal(): Promise<void> {}

  override async forgetProcess(_runtimeId: string, processId: number): Promise<void> {
    if (this.#find(processId).state.status === 'running') throw failedPrecondition(`process ${processId} is running`);
    this.#processes.delete(processId);
  }

  #find(processId: number): Kept {
    const kept = this.#processes.get(processId);
    if (kept === undefined) throw notFound('process', String(processId));
    return kept;
  }

  /** Its output from `from`, then, when following, waits for its end (or a detach). */
  #reader(kept: Kept, from: number, follow: boolean): ProcessStream {
    let detached!: () => void;
    const detach = new Promise<void>((resolve) => (detached = resolve));
    const chunks: ProcessOutput[] = from < kept.output.length ? [{ channel: 'stdout', offset: from, data: kept.output.subarray(from), lost: 0 }] : [];
    const finished = async (): Promise<ProcessState | null> => {
      if (!follow) return kept.state.status === 'running' ? null : { ...kept.state };
      const gone = await Promise.race([kept.ended.then(() => false), detach.then(() => true)]);
      return gone ? null : { ...kept.state };
    };
    const done = finished();
    return {
      state: { ...kept.state },
      done,
      start: { stdout: from, stderr: 0 },
      write: async () => {},
      endInput: () => kept.end('exited', 0),
      detach: () => detached(),
      async *[Symbol.asyncIterator]() {
        yield* chunks;
        await done;
      },
    };
  }
}
