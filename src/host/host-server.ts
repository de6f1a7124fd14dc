/**
 * The privileged host process's side of its link to the API's process: each call checked against
 * its schema (host-calls.ts), then done by the VM driver or the gateway, which only this process
 * holds. The host keeps no state of the API's: a new API process (after a crash) asks for the
 * same things again and gets the same answers.
 */
import type { DiskChunk, NetworkGateway, RemoteCheckpoint, TemplateDisks, VmDriver } from '../core/ports.js';
import { invalidArgument } from '../core/errors.js';
import type { PartLink } from '../platform/part-link.js';
import { forward, sendAll } from '../platform/link-pipes.js';
import type { AgentChannel } from '../vm/agent-part.js';
import { partFailure } from '../vm/agent-replies.js';
import { GUEST_CALLS, checkedArgs, chunkOffset, toLinkError, type GuestCall, type HostArgs, type HostCall, type HostFacts } from './host-calls.js';

/** What the host process runs for the API's: its VMs and their network. */
export interface HostParts {
  driver: VmDriver & TemplateDisks & { agentOf(runtimeId: string): AgentChannel };
  gateway: NetworkGateway & { tapOf(runtimeId: string): string | undefined };
  facts: HostFacts;
}

export type StartHost = (egressCa: HostArgs<'startHost'>['egressCa']) => Promise<HostParts>;

const isGuestCall = (method: string): method is GuestCall => Object.hasOwn(GUEST_CALLS, method);

export function serveHost(link: PartLink, startHost: StartHost): void {
  let parts: HostParts | null = null;
  const running = (): HostParts => {
    if (parts === null) throw new Error('the host has not started');
    return parts;
  };
  const on = <M extends HostCall>(method: M, work: (args: HostArgs<M>, p: HostParts) => unknown) =>
    link.handle(method, async (raw) => {
      try {
        const args = checkedArgs(method, raw);
        return (await work(args, method === 'startHost' ? (null as never) : running())) ?? null;
      } catch (err) {
        throw toLinkError(err);
      }
    });
  /** A VM goes only on the TAP the gateway gave its own runtime: the API cannot put it on another's. */
  const checkedSpec = <S extends { runtimeId: string; tap: string | null }>(spec: S, p: HostParts): S => {
    if (spec.tap !== null && p.gateway.tapOf(spec.runtimeId) !== spec.tap) throw invalidArgument(`TAP '${spec.tap}' is not runtime ${spec.runtimeId}'s`);
    return spec;
  };

  on('startHost', async (a) => {
    parts ??= await startHost(a.egressCa);
    return parts.facts;
  });

  on('createTemplate', (a, p) => p.driver.createTemplate(a.checkpointId, a.resources));
  on('sweep', (_a, p) => p.driver.sweep());
  on('create', (a, p) => p.driver.create(checkedSpec(a, p)));
  on('createSpare', (a, p) => p.driver.createSpare(checkedSpec(a, p)));
  on('start', (a, p) => p.driver.start(checkedSpec(a, p)));
  on('pause', (a, p) => p.driver.pause(a.runtimeId));
  on('resume', (a, p) => p.driver.resume(a.runtimeId));
  on('suspend', (a, p) => p.driver.suspend(a.runtimeId));
  on('stop', (a, p) => p.driver.stop(a.runtimeId, a.deadlineMs));
  on('destroy', (a, p) => p.driver.destroy(a.runtimeId));
  on('setMemoryTarget', (a, p) => p.driver.setMemoryTarget(a.runtimeId, a.mib));
  on('reattach', (a, p) => p.driver.reattach(a.runtimeId));
  on('readConsoleLog', (a, p) => p.driver.readConsoleLog(a.runtimeId, a.maxBytes));
  on('runtimeIds', (_a, p) => p.driver.runtimeIds());

  on('checkpoint', (a, p) => p.driver.checkpoint(a.runtimeId, a.checkpointId));
  on('captureDisk', (a, p) => p.driver.captureDisk(a.runtimeId, a.checkpointId, a.shape));
  on('adoptDisk', (a, p) => p.driver.adoptDisk(a.runtimeId, a.checkpointId));
  on('verifyCheckpoint', (a, p) => p.driver.verifyCheckpoint(a.checkpointId));
  on('deleteCheckpoint', (a, p) => p.driver.deleteCheckpoint(a.checkpointId));
  on('heldCheckpointIds', (_a, p) => p.driver.heldCheckpointIds());
  on('orphanedLayerBytes', (a, p) => p.driver.orphanedLayerBytes(a.runtimeIds, a.checkpointIds));
  on('describeCheckpoint', (a, p) => p.driver.describeCheckpoint(a.checkpointId));
  on('readCheckpointFile', async (a, p) => {
    const body = await p.driver.readCheckpointFile(a.checkpointId, a.file);
    sendAll(body, link.acceptStream(a.stream, { receives: false, sends: true }), toLinkError);
  });
  on('importCheckpoint', (a, p) => {
    // The files come from the API's process, which reads them from the other host over the hop.
    const source: RemoteCheckpoint = {
      description: a.description,
      open: async (file) => {
        const stream = link.openStream({ receives: true, sends: false });
        await link.call('openImportFile', { importId: a.importId, file, stream: stream.id }).catch((err: unknown) => {
          stream.close();
          throw err;
        });
        return (async function* () {
          for await (const chunk of stream) yield chunk.data;
        })();
      },
    };
    return p.driver.importCheckpoint(a.checkpointId, source, a.expected);
  });

  on('importTemplateDisk', (a, p) => {
    const stream = link.acceptStream(a.stream, { receives: true, sends: false });
    // The offsets are checked where the file is written (template-disks.ts); a chunk without one is out of order there.
    const chunks = (async function* (): AsyncGenerator<DiskChunk> {
      for await (const chunk of stream) yield { offset: chunkOffset(chunk.meta) as number, data: chunk.data };
    })();
    return p.driver.importTemplateDisk(a.templateId, a.sizeBytes, chunks).finally(() => stream.cancel());
  });
  on('deleteTemplateDisk', (a, p) => p.driver.deleteTemplateDisk(a.templateId));

  on('attach', (a, p) => p.gateway.attach(a as never));
  on('update', (a, p) => p.gateway.update(a as never));
  on('detach', (a, p) => p.gateway.detach(a.runtimeId));
  on('restore', (a, p) => p.gateway.restore(a as never));

  on('guestCall', (a, p) => {
    if (!isGuestCall(a.method) || GUEST_CALLS[a.method] !== null) throw invalidArgument(`'${a.method}' is not a guest call`);
    return p.driver.agentOf(a.runtimeId).call(a.method, a.args);
  });
  on('guestStream', async (a, p) => {
    const directions = isGuestCall(a.method) ? GUEST_CALLS[a.method] : null;
    if (directions === null) throw invalidArgument(`'${a.method}' is not a guest call with a stream`);
    const agent = p.driver.agentOf(a.runtimeId);
    // The API's stream, seen from here: what it receives, this side sends.
    const theirs = link.acceptStream(a.stream, { receives: directions.sends, sends: directions.receives });
    let opened: Awaited<ReturnType<AgentChannel['withStream']>>;
    try {
      opened = await agent.withStream(a.method, a.args, directions);
    } catch (err) {
      theirs.close();
      throw err;
    }
    const { stream: ours, reply } = opened;
    if (directions.receives) void forward(ours, theirs, (err) => toLinkError(partFailure(err, agent.vmExited())));
    if (directions.sends) void forward(theirs, ours, (err) => (err instanceof Error ? err : new Error(String(err))));
    try {
      return await reply;
    } catch (err) {
      theirs.close();
      throw err;
    }
  });
}
