/**
 * Processes through vessel-agent (docs/agent-protocol.md, "Processes"), in the core's terms:
 * offsets as numbers, states as the API names them, the agent's errors as the API's.
 */
import { VesselError, failedPrecondition, notFound } from '../core/errors.js';
import type { AttachRequest, OutputChannel, ProcessOutput, ProcessSpec, ProcessState, ProcessStream } from '../core/types.js';
import { AgentClosedError, AgentError, guestDate, type AgentClient, type AgentProcess, type ProcessInfo } from './agent/agent-client.js';
import { agentFailure } from './guest-errors.js';
import { spawnPlan, startFailure } from './guest-exec.js';

type Agent = () => Promise<AgentClient>;

export function processState(info: ProcessInfo): ProcessState {
  return {
    id: info.id,
    pid: info.pid,
    command: info.command,
    status: info.state,
    exitCode: info.state === 'exited' ? info.code : null,
    signal: info.state === 'signaled' ? info.code : null,
    pty: info.pty,
    stdinOpen: info.stdinOpen,
    startedAt: guestDate(info.startNs),
    endedAt: info.endNs === 0n ? null : guestDate(info.endNs),
    stdout: { start: Number(info.stdout.start), end: Number(info.stdout.end) },
    stderr: { start: Number(info.stderr.start), end: Number(info.stderr.end) },
  };
}

/** The agent's answers about one process, as the API's errors. */
function processFailure(err: unknown, processId: number): unknown {
  if (!(err instanceof AgentError)) return agentFailure(err);
  if (err.kind === 'NO_PROCESS') return notFound('process', String(processId));
  if (err.kind === 'ERRNO' && err.errno === EBUSY) return failedPrecondition(`process ${processId} is still running; signal it first`);
  if (err.kind === 'ERRNO' && err.errno === ENOTTY) return failedPrecondition(`process ${processId} has no terminal`);
  if (err.kind === 'ERRNO' && err.errno === ESRCH) return failedPrecondition(`process ${processId} has exited`);
  if (err.kind === 'LIMIT') return failedPrecondition(`the guest is at its limit of readers or processes: ${err.detail}`);
  // What else the guest refuses is about the guest (its kernel said no), not a fault of ours.
  if (err.kind === 'ERRNO') return failedPrecondition(`the guest refused: ${err.detail}`);
  return new VesselError('internal', `the guest agent refused: ${err.detail}`);
}
const ESRCH = 3;
const EBUSY = 16;
const ENOTTY = 25;

/** Transport failures mid-stream are the runtime being unavailable, as for every other call. */
function streamFailure(err: unknown): unknown {
  return err instanceof AgentClosedError ? new VesselError('unavailable', `the guest agent channel ended: ${err.message}`) : agentFailure(err);
}

class AgentProcessStream implements ProcessStream {
  /**
   * Where this reader asked to start, per channel. The agent is asked for the oldest byte its
   * ring holds, and what comes before the asked offset is skipped here: that is exact even when
   * the ring moves on meanwhile, where clamping offsets read beforehand would race with it.
   */
  readonly #from: Record<OutputChannel, number> | null;
  /** Whether a channel has delivered a chunk yet (its first one reports what the ring had dropped). */
  readonly #started = { stdout: false, stderr: false };

  constructor(
    private readonly proc: AgentProcess,
    readonly state: ProcessState,
    from: Record<OutputChannel, number> | null = null,
  ) {
    this.#from = from;
  }

  get done(): Promise<ProcessState | null> {
    return this.proc.done.then((info) => (info === null ? null : processState(info)), (err: unknown) => {
      throw streamFailure(err);
    });
  }

  get start(): { stdout: number; stderr: number } {
    const at = (c: OutputChannel) => Math.max(Number(this.proc.start[c]), this.#from?.[c] ?? 0);
    return { stdout: at('stdout'), stderr: at('stderr') };
  }

  async *[Symbol.asyncIterator](): AsyncIterator<ProcessOutput> {
    try {
      for await (const chunk of this.proc) {
        let offset = Number(chunk.offset);
        let data = chunk.data;
        let lost = Number(chunk.lost);
        const wanted = this.#from?.[chunk.channel];
        if (wanted !== undefined) {
          if (offset + data.length <= wanted) continue;
          if (offset < wanted) {
            data = data.subarray(wanted - offset);
            offset = wanted;
          }
          if (!this.#started[chunk.channel]) lost = Math.max(0, offset - wanted);
        }
        this.#started[chunk.channel] = true;
        yield { channel: chunk.channel, offset, data, lost };
      }
    } catch (err) {
      throw streamFailure(err);
    }
  }

  async write(data: Buffer): Promise<void> {
    try {
      await this.proc.write(data);
    } catch (err) {
      throw streamFailure(err);
    }
  }

  endInput(): void {
    this.proc.end();
  }

  detach(): void {
    this.proc.cancel();
  }
}

export async function spawnProcess(agent: Agent, spec: ProcessSpec): Promise<ProcessStream> {
  const ga = await agent();
  const plan = await spawnPlan(ga, spec);
  const proc = ga.spawn({
    ...plan,
    ...(spec.pty === null ? {} : { pty: spec.pty }),
    stdin: spec.stdin,
    hold: spec.hold,
    forgetOnExit: spec.forgetOnExit,
    ringBytes: spec.ringBytes,
  });
  try {
    return new AgentProcessStream(proc, processState(await proc.info));
  } catch (err) {
    throw startFailure(err, spec);
  }
}

export async function listProcesses(agent: Agent): Promise<ProcessState[]> {
  try {
    return (await (await agent()).listProcesses()).map(processState);
  } catch (err) {
    throw agentFailure(err);
  }
}

export async function attachProcess(agent: Agent, processId: number, request: AttachRequest): Promise<ProcessStream> {
  const ga = await agent();
  const { from } = request;
  const proc = ga.attach(processId, { from: typeof from === 'object' ? 'oldest' : from, follow: request.follow, input: request.input });
  try {
    return new AgentProcessStream(proc, processState(await proc.info), typeof from === 'object' ? from : null);
  } catch (err) {
    throw processFailure(streamFailure(err), processId);
  }
}

/** Runs a one-shot request about a process, with the agent's refusals as API errors. */
export async function onProcess(agent: Agent, processId: number, work: (ga: AgentClient) => Promise<void>): Promise<void> {
  try {
    await work(await agent());
  } catch (err) {
    throw processFailure(err, processId);
  }
}
