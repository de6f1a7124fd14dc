/**
 * A terminal over a WebSocket (docs/processes.md, "Terminals"): binary messages are the
 * terminal's bytes each way; text messages are JSON control messages (resize, input as text;
 * exit from the server). Works with any WebSocket client and with xterm.js.
 */
import type { FastifyRequest } from 'fastify';
import type { WebSocket } from 'ws';
import { invalidArgument } from '../../core/errors.js';
import { exitCodeOf, type Attachment } from '../../core/processes.js';
import { RuntimeParams, TerminalQuery } from '../schemas.js';
import { COMMAND_FAILED, type RoutePlugin } from './common.js';

/** Output the socket may queue before we stop reading the terminal (and the shell waits). */
const OUTPUT_HIGH_WATER = 256 * 1024;
/** Input waiting for the guest before we stop reading the socket. */
const INPUT_HIGH_WATER = 256 * 1024;
/** The largest message a client may send: a paste, not a file transfer. */
export const TERMINAL_MAX_MESSAGE = 1024 * 1024;
/** A client that answers no ping within this long is gone (a laptop asleep, a NAT that forgot). */
const PING_INTERVAL_MS = 30_000;

type Control = { type: 'resize'; rows: number; cols: number } | { type: 'input'; data: string };

function parseControl(text: string): Control | null {
  let msg: unknown;
  try {
    msg = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof msg !== 'object' || msg === null) return null;
  const m = msg as Record<string, unknown>;
  const size = (v: unknown) => Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 1000;
  if (m.type === 'resize' && size(m.rows) && size(m.cols)) return { type: 'resize', rows: m.rows as number, cols: m.cols as number };
  if (m.type === 'input' && typeof m.data === 'string') return { type: 'input', data: m.data };
  return null;
}

/** Shell output to the client, at the pace the client takes it; then the exit, and the close. */
async function pumpTerminal(socket: WebSocket, attachment: Attachment): Promise<void> {
  const { stream } = attachment;
  for await (const chunk of stream) {
    if (socket.readyState !== socket.OPEN) return;
    if (socket.bufferedAmount < OUTPUT_HIGH_WATER) socket.send(chunk.data, { binary: true });
    else await new Promise<void>((resolve) => socket.send(chunk.data, { binary: true }, () => resolve()));
  }
  const final = await stream.done;
  if (final === null || socket.readyState !== socket.OPEN) return socket.close(1011, 'the terminal stream ended');
  socket.send(JSON.stringify({ type: 'exit', exit_code: exitCodeOf(final), signal: final.signal }));
  socket.close(1000, 'exited');
}

/** Client input to the terminal, in order, with the socket paused while the guest catches up. */
function feedTerminal(socket: WebSocket, attachment: Attachment, resize: (rows: number, cols: number) => Promise<void>): void {
  let queued = 0;
  let chain = Promise.resolve();
  const write = (bytes: Buffer) => {
    queued += bytes.length;
    if (queued > INPUT_HIGH_WATER) socket.pause();
    chain = chain
      .then(() => attachment.stream.write(bytes))
      .then(() => {
        queued -= bytes.length;
        if (queued <= INPUT_HIGH_WATER) socket.resume();
      });
    chain.catch(() => socket.close(1011, 'the terminal stopped taking input'));
  };
  // One resize in flight, and only the latest one waiting: a flood of them costs one request.
  let resizing = false;
  let wanted: { rows: number; cols: number } | null = null;
  const nextResize = () => {
    if (resizing || wanted === null) return;
    const { rows, cols } = wanted;
    wanted = null;
    resizing = true;
    resize(rows, cols)
      .catch(() => undefined) // the process may have just exited
      .finally(() => {
        resizing = false;
        nextResize();
      });
  };
  socket.on('message', (data: Buffer | ArrayBuffer | Buffer[], isBinary: boolean) => {
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as ArrayBuffer);
    if (isBinary) return write(bytes);
    const control = parseControl(bytes.toString('utf8'));
    if (control === null) return socket.close(1003, 'text messages are JSON: {"type":"resize","rows":R,"cols":C} or {"type":"input","data":"..."}');
    if (control.type === 'input') return write(Buffer.from(control.data, 'utf8'));
    wanted = { rows: control.rows, cols: control.cols };
    nextResize();
  });
}

/** Pings the client; one that missed the last ping is dropped, which closes its attachment. */
function keepAlive(socket: WebSocket): void {
  let answered = true;
  socket.on('pong', () => (answered = true));
  const timer = setInterval(() => {
    if (!answered) return socket.terminate();
    answered = false;
    socket.ping();
  }, PING_INTERVAL_MS);
  socket.once('close', () => clearInterval(timer));
}

export const terminalRoutes: RoutePlugin = async (app, { core }) => {
  const attachments = new WeakMap<FastifyRequest, Attachment>();

  app.route({
    method: 'GET',
    url: '/v1/runtimes/:runtime_id/terminal',
    config: { scope: 'exec', forward: 'runtime' },
    schema: {
      operationId: 'openTerminal',
      tags: ['processes'],
      summary: 'A terminal over a WebSocket: a login shell, or an existing pty process (process_id)',
      description:
        'Binary messages carry the terminal bytes; JSON text messages carry resize and input, and the exit. A browser, which cannot set Authorization on a WebSocket, offers the subprotocols `vessel.v1` and `vessel.bearer.<base64url token>`; the server selects `vessel.v1` (docs/processes.md).',
      params: RuntimeParams,
      querystring: TerminalQuery,
      response: {
        101: {
          description: 'switching to the WebSocket protocol',
          type: 'null',
          headers: { 'Sec-WebSocket-Protocol': { type: 'string', enum: ['vessel.v1'], description: 'vessel.v1, when the client offered it' } },
        },
        ...COMMAND_FAILED,
      },
    },
    // Everything that can fail is done before the upgrade, so a failure is a plain HTTP error.
    preHandler: async (req) => {
      if (!req.ws) throw invalidArgument('this route takes a WebSocket upgrade (Connection: Upgrade, Upgrade: websocket)');
      const q = req.query;
      const attachment = await core.processes.terminal(req.principal.tenantId, req.params.runtime_id, {
        processId: q.process_id ?? null,
        size: { rows: q.rows ?? 24, cols: q.cols ?? 80 },
        command: null,
        user: q.user ?? null,
      });
      attachments.set(req, attachment);
      // Whatever happens next (the upgrade fails, the client goes), the socket's end is ours.
      req.raw.socket.once('close', () => attachment.close());
    },
    handler: async () => {
      throw invalidArgument('this route takes a WebSocket upgrade');
    },
    wsHandler: (socket, req) => {
      const attachment = attachments.get(req)!;
      socket.on('close', () => attachment.close());
      socket.on('error', () => attachment.close());
      keepAlive(socket);
      feedTerminal(socket, attachment, (rows, cols) => core.processes.resize(attachment.runtimeId, attachment.stream.state.id, rows, cols));
      pumpTerminal(socket, attachment).catch(() => socket.close(1011, 'the terminal stream failed'));
    },
  });
};
