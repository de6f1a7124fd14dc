/**
 * The fake driver whose processes are real: they go through the real driver's process code
 * (src/vm/guest-processes.ts) to a real vessel-agent running on the host (agent-harness.ts). It
 * tests the API's process routes byte for byte against the agent without booting a VM.
 */
import type { AttachRequest, ProcessSpec, ProcessState, ProcessStream } from '../../src/core/types.js';
import type { AgentClient } from '../../src/vm/agent/agent-client.js';
import { attachProcess, listProcesses, onProcess, spawnProcess } from '../../src/vm/guest-processes.js';
import { FakeDriver } from './fake-driver.js';

export class HostAgentDriver extends FakeDriver {
  constructor(private readonly agent: () => AgentClient) {
    super();
  }

  readonly #client = async (): Promise<AgentClient> => this.agent();

  override spawnProcess(_runtimeId: string, spec: ProcessSpec): Promise<ProcessStream> {
    return spawnProcess(this.#client, spec);
  }

  override attachProcess(_runtimeId: string, processId: number, request: AttachRequest): Promise<ProcessStream> {
    return attachProcess(this.#client, processId, request);
  }

  override listProcesses(): Promise<ProcessState[]> {
    return listProcesses(this.#client);
  }

  override signalProcess(_runtimeId: string, processId: number, signal: number, tree: boolean): Promise<void> {
    return onProcess(this.#client, processId, (ga) => ga.signal(processId, signal, { tree }));
  }

  override forgetProcess(_runtimeId: string, processId: number): Promise<void> {
    return onProcess(this.#client, processId, (ga) => ga.forget(processId));
  }
}
