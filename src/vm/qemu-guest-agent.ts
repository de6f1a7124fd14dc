/**
 * The core's GuestAgent port for one runtime's VM: each call goes to vessel-agent through the
 * driver, which finds the VM at call time and turns transport failures into unavailable.
 */
import type { Readable } from 'node:stream';
import type { GuestAgent } from '../core/ports.js';
import type { AttachRequest, GuestFileInfo, GuestFileStat, ProcessSpec, ProcessState, ProcessStream } from '../core/types.js';
import type { AgentClient } from './agent/agent-client.js';
import { listGuestDir, makeGuestDir, readGuestArchive, removeGuestPath, statGuestPath, writeGuestArchive } from './guest-directories.js';
import { readGuestFile, writeGuestFile } from './guest-files.js';
import { attachProcess, listProcesses, onProcess, spawnProcess } from './guest-processes.js';

/** Runs work against the runtime's agent connection (QemuDriver's #withAgent). */
export type WithAgent = <T>(work: (agent: () => Promise<AgentClient>) => Promise<T>) => Promise<T>;

export class QemuGuestAgent implements GuestAgent {
  constructor(private readonly withAgent: WithAgent) {}

  spawnProcess(spec: ProcessSpec): Promise<ProcessStream> {
    return this.withAgent((agent) => spawnProcess(agent, spec));
  }

  attachProcess(processId: number, request: AttachRequest): Promise<ProcessStream> {
    return this.withAgent((agent) => attachProcess(agent, processId, request));
  }

  listProcesses(): Promise<ProcessState[]> {
    return this.withAgent((agent) => listProcesses(agent));
  }

  signalProcess(processId: number, signal: number, tree: boolean): Promise<void> {
    return this.withAgent((agent) => onProcess(agent, processId, (ga) => ga.signal(processId, signal, { tree })));
  }

  resizeTerminal(processId: number, rows: number, cols: number): Promise<void> {
    return this.withAgent((agent) => onProcess(agent, processId, (ga) => ga.resize(processId, rows, cols)));
  }

  forgetProcess(processId: number): Promise<void> {
    return this.withAgent((agent) => onProcess(agent, processId, (ga) => ga.forget(processId)));
  }

  readFile(path: string): Promise<Readable> {
    return this.withAgent((agent) => readGuestFile(agent, path));
  }

  writeFile(path: string, body: Readable, maxBytes: number): Promise<number> {
    return this.withAgent((agent) => writeGuestFile(agent, path, body, maxBytes));
  }

  listDir(path: string): Promise<GuestFileInfo[]> {
    return this.withAgent((agent) => listGuestDir(agent, path));
  }

  statPath(path: string, followSymlinks: boolean): Promise<GuestFileStat> {
    return this.withAgent((agent) => statGuestPath(agent, path, followSymlinks));
  }

  makeDir(path: string): Promise<void> {
    return this.withAgent((agent) => makeGuestDir(agent, path));
  }

  removePath(path: string, recursive: boolean): Promise<void> {
    return this.withAgent((agent) => removeGuestPath(agent, path, recursive));
  }

  readArchive(dir: string): Promise<Readable> {
    return this.withAgent((agent) => readGuestArchive(agent, dir));
  }

  writeArchive(dir: string, body: Readable, maxBytes: number): Promise<number> {
    return this.withAgent((agent) => writeGuestArchive(agent, dir, body, maxBytes));
  }
}
