/**
 * Commands in a runtime: the spec's buffered exec, the same exec streamed as server-sent events
 * (Accept: text/event-stream), and background processes with their output, stdin and signals
 * (docs/processes.md).
 */
import { Type, type TSchema } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { invalidArgument } from '../../core/errors.js';
import type { AttachRequest, ExecRequest, ProcessOutput, ProcessStream } from '../../core/types.js';
import { DEFAULT_RING_BYTES } from '../../core/processes.js';
import { EventStream, OutputEncoder, wantsEventStream } from '../event-stream.js';
import { processView } from '../presenters.js';
import {
  DEFAULT_EXEC_TIMEOUT_SECS,
  DEFAULT_MAX_OUTPUT_BYTES,
  DataOf,
  Empty,
  ExecBody,
  ExecEvent,
  ExecResult,
  Int64,
  OutputQuery,
  Process,
  ProcessCreateBody,
  ProcessOutputEvent,
  ProcessParams,
  RuntimeParams,
  SignalBody,
  StdinQuery,
} from '../schemas.js';
import { COMMAND_FAILED, acceptRawBodies, binary, rawBody, type RoutePlugin } from './common.js';

const tags = ['processes'];
/** Server-sent events: `event:` lines name them and `data:` lines carry JSON (docs/processes.md). */
const eventStream = (event: TSchema) => ({ 'text/event-stream': { schema: Type.Ref(event) } });

/** `since` or an SSE Last-Event-ID: "stdout" or "stdout,stderr" offsets. */
function resumePoint(since: string | undefined, req: FastifyRequest): AttachRequest['from'] {
  const given = since ?? req.headers['last-event-id'];
  if (given === undefined) return 'oldest';
  const m = typeof given === 'string' ? /^(\d{1,15})(?:,(\d{1,15}))?$/.exec(given) : null;
  if (m === null) throw invalidArgument('Last-Event-ID must be "stdout" or "stdout,stderr" offsets of at most 15 digits');
  // Only a stdout offset: stderr from its start (what the ring dropped of it is reported as lost).
  return { stdout: Number(m[1]), stderr: Number(m[2] ?? 0) };
}

/** Sends each chunk as a `stdout` or `stderr` event, at the pace the client takes them. */
async function pumpOutput(events: EventStream, output: AsyncIterable<ProcessOutput>, encoder: OutputEncoder): Promise<void> {
  for await (const chunk of output) {
    for (const e of encoder.encode(chunk)) await events.send(e.channel, e.event, e.id);
    if (events.closed) return; // leaving the loop detaches from the process
  }
}

/** The process ended: nothing can complete a character still held back. */
async function flushOutput(events: EventStream, encoder: OutputEncoder): Promise<void> {
  for (const e of encoder.flush()) await events.send(e.channel, e.event, e.id);
}

const startAt = (stream: ProcessStream) => new OutputEncoder(stream.start);

export const processRoutes: RoutePlugin = async (app, { core }) => {
  const processes = core.processes;

  app.post('/v1/runtimes/:runtime_id/exec', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'execCommand',
      tags: ['runtimes'],
      summary: 'Run a command: buffered (JSON), or streamed as it runs with Accept: text/event-stream',
      params: RuntimeParams,
      body: ExecBody,
      response: {
        200: {
          description: 'the result once the command exited (JSON), or its events as it runs (text/event-stream)',
          content: { 'application/json': { schema: Type.Object({ data: Type.Ref(ExecResult) }) }, ...eventStream(ExecEvent) },
        },
        ...COMMAND_FAILED,
      },
    },
  }, async (req, reply) => {
    const b = req.body;
    const request: ExecRequest = {
      command: b.command,
      args: b.args ?? [],
      cwd: b.cwd ?? null,
      env: b.env ?? {},
      user: b.user ?? null,
      stdin: b.stdin ?? null,
      maxOutputBytes: b.max_output_bytes ?? DEFAULT_MAX_OUTPUT_BYTES,
      timeoutSecs: b.timeout_secs ?? DEFAULT_EXEC_TIMEOUT_SECS,
    };
    if (!wantsEventStream(req)) {
      if (b.background === true) throw invalidArgument('background applies to a streamed exec (Accept: text/event-stream)');
      return { data: await processes.exec(req.principal.tenantId, req.params.runtime_id, request) };
    }
    const session = await processes.execStream(req.principal.tenantId, req.params.runtime_id, { ...request, background: b.background ?? false });
    const events = new EventStream(reply);
    events.onClose(() => session.abandon());
    try {
      await events.send('start', processView(session.process));
      // A spawned process's channels start at 0.
      const encoder = new OutputEncoder({ stdout: 0, stderr: 0 });
      await pumpOutput(events, session.output, encoder);
      if (!events.closed) {
        const result = await session.result();
        await flushOutput(events, encoder);
        await events.send('exit', result);
      }
    } catch (err) {
      await events.fail(err);
    } finally {
      events.end();
    }
    return reply;
  });

  app.post('/v1/runtimes/:runtime_id/processes', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'startProcess',
      tags,
      summary: 'Start a background process',
      params: RuntimeParams,
      body: ProcessCreateBody,
      response: { 201: DataOf(Type.Ref(Process), 'the process, running'), ...COMMAND_FAILED },
    },
  }, async (req, reply) => {
    const b = req.body;
    const state = await processes.start(req.principal.tenantId, req.params.runtime_id, {
      command: b.command,
      args: b.args ?? [],
      cwd: b.cwd ?? null,
      env: b.env ?? {},
      user: b.user ?? null,
      pty: b.pty ?? null,
      stdin: b.stdin ?? false,
      ringBytes: b.ring_bytes ?? DEFAULT_RING_BYTES,
    });
    return reply.code(201).send({ data: processView(state) });
  });

  app.get('/v1/runtimes/:runtime_id/processes', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'listProcesses',
      tags,
      summary: 'List the processes the guest keeps, running and exited (at most 128; not paged)',
      params: RuntimeParams,
      response: { 200: DataOf(Type.Array(Type.Ref(Process)), 'every process the guest keeps') },
    },
  }, async (req) => ({ data: (await processes.list(req.principal.tenantId, req.params.runtime_id)).map(processView) }));

  app.get('/v1/runtimes/:runtime_id/processes/:process_id', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: { operationId: 'getProcess', tags, summary: 'Get a process', params: ProcessParams, response: { 200: DataOf(Type.Ref(Process), 'the process') } },
  }, async (req) => ({ data: processView(await processes.get(req.principal.tenantId, req.params.runtime_id, req.params.process_id)) }));

  app.delete('/v1/runtimes/:runtime_id/processes/:process_id', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'forgetProcess',
      tags,
      summary: 'Forget an exited process and its kept output',
      params: ProcessParams,
      response: { 200: Empty('the process and its output are gone') },
    },
  }, async (req) => {
    await processes.forget(req.principal.tenantId, req.params.runtime_id, req.params.process_id);
    return { data: {} };
  });

  app.get('/v1/runtimes/:runtime_id/processes/:process_id/output', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'streamProcessOutput',
      tags,
      summary: "A process's output as server-sent events, from `since` (or Last-Event-ID) or the oldest byte kept",
      params: ProcessParams,
      querystring: OutputQuery,
      response: { 200: { description: "the process's output events", content: eventStream(ProcessOutputEvent) } },
    },
  }, async (req, reply) => {
    const from = resumePoint(req.query.since, req);
    const attachment = await processes.output(req.principal.tenantId, req.params.runtime_id, req.params.process_id, from, req.query.follow ?? true);
    const events = new EventStream(reply);
    events.onClose(() => attachment.close());
    try {
      const { stream } = attachment;
      await events.send('start', processView(stream.state));
      const encoder = startAt(stream);
      await pumpOutput(events, stream, encoder);
      const final = await stream.done;
      // At `end` the process may yet complete a held-back character: the id stops before it.
      if (final !== null) await flushOutput(events, encoder);
      await events.send(final === null ? 'end' : 'exit', final === null ? { next: encoder.id } : processView(final), encoder.id);
    } catch (err) {
      await events.fail(err);
    } finally {
      events.end();
    }
    return reply;
  });

  app.post('/v1/runtimes/:runtime_id/processes/:process_id/signal', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'signalProcess',
      tags,
      summary: 'Send a signal to a process (and by default its whole tree)',
      params: ProcessParams,
      body: SignalBody,
      response: { 200: Empty('the signal was sent') },
    },
  }, async (req) => {
    await processes.signal(req.principal.tenantId, req.params.runtime_id, req.params.process_id, req.body.signal, req.body.tree ?? true);
    return { data: {} };
  });
};

/** Its own plugin scope: here the body is raw bytes for the process's stdin. */
export const stdinRoutes: RoutePlugin<{ maxStdinBytes: number }> = async (app, { core, maxStdinBytes }) => {
  acceptRawBodies(app);

  app.post('/v1/runtimes/:runtime_id/processes/:process_id/stdin', {
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'writeProcessStdin',
      tags,
      summary: "Write the raw request body (any Content-Type; may be empty) to a process's stdin (eof=true closes it after)",
      params: ProcessParams,
      querystring: StdinQuery,
      body: binary('application/octet-stream'),
      response: { 200: DataOf(Type.Object({ bytes: Int64({ minimum: 0 }) }), 'the bytes the guest took') },
    },
  }, async (req) => {
    const body = rawBody(req);
    const gone = new AbortController();
    req.raw.socket.once('close', () => gone.abort());
    const bytes = await core.processes.writeStdin(req.principal.tenantId, req.params.runtime_id, req.params.process_id, body, req.query.eof ?? false, maxStdinBytes, gone.signal);
    return { data: { bytes } };
  });
};
