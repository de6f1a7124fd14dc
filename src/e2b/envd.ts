/**
 * envd, the agent E2B's SDK talks to inside each sandbox, as Vessel serves it for every runtime:
 * its Connect-RPC process and filesystem services (process.ts, filesystem.ts) and its HTTP routes `/files` (download, upload)
 * and `/health`. The SDK names the sandbox in the `E2b-Sandbox-Id` header (E2B_SANDBOX_URL mode)
 * and authenticates with `X-Access-Token`, which here is a Vessel token (answers.ts).
 *
 * Served under /e2b-envd on the API port, where a single host's ingress hands envd's port
 * (src/net/ingress.ts); docs/e2b.md.
 */
import { posix } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createContextKey, createContextValues, type HandlerContext } from '@connectrpc/connect';
import { connectNodeAdapter } from '@connectrpc/connect-node';
import { Type } from '@sinclair/typebox';
import type { FastifyRequest } from 'fastify';
import { VesselError, invalidArgument } from '../core/errors.js';
import type { Scope } from '../core/types.js';
import { acceptRawBodies, rawBody, type RoutePlugin } from '../api/routes/common.js';
import { ENVD_PORT } from './addresses.js';
import { acceptTokenHeader, answerE2bErrors } from './answers.js';
import { filesystemService, guestPathOf } from './filesystem.js';
import { Filesystem } from './gen/filesystem/filesystem_pb.js';
import { Process } from './gen/process/process_pb.js';
import { processService, type EnvdCaller } from './process.js';

/** A Connect request body (a StartRequest: command, args, environment) is at most this large. */
const MAX_RPC_BYTES = 1024 * 1024;
/** What a multipart upload may carry beyond its files: part headers and boundaries. */
const MULTIPART_OVERHEAD_BYTES = 64 * 1024;

const FileQuery = Type.Object({
  path: Type.Optional(Type.String({ maxLength: 4096 })),
  username: Type.Optional(Type.String({ maxLength: 256 })),
});

/** The RPCs served, each with the scope a token needs for it. */
const RPC_SCOPES: Record<string, Scope> = {
  '/process.Process/Start': 'exec',
  '/process.Process/Connect': 'exec',
  '/process.Process/List': 'exec',
  '/process.Process/SendInput': 'exec',
  '/process.Process/CloseStdin': 'exec',
  '/process.Process/SendSignal': 'exec',
  '/process.Process/Update': 'exec',
  '/filesystem.Filesystem/Stat': 'files:read',
  '/filesystem.Filesystem/ListDir': 'files:read',
  '/filesystem.Filesystem/MakeDir': 'files:write',
  '/filesystem.Filesystem/Move': 'files:write',
  '/filesystem.Filesystem/Remove': 'files:write',
};

/** The sandbox's unreachability as E2B's proxy answers it (502), which the SDK reads as a sandbox gone. */
const sandboxGone = (id: string) => new VesselError('unavailable', `sandbox '${id.slice(0, 80)}' is not running or does not exist`, { httpStatus: 502 });

/**
 * The user envd's SDK names in `Authorization: Basic base64("<user>:")` (sent when a call gives
 * `user`), as it is (process.ts checks it), or null when the header is not Basic. The password
 * part is always empty and ignored.
 */
export function basicUser(header: string | undefined): string | null {
  const m = /^Basic ([A-Za-z0-9+/=]{1,1024})$/i.exec(header ?? '');
  if (m === null) return null;
  const decoded = Buffer.from(m[1]!, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const user = colon < 0 ? decoded : decoded.slice(0, colon);
  return user === '' ? null : user;
}

export const e2bEnvd: RoutePlugin<{ maxFileBytes: number }> = async (app, { core, maxFileBytes }) => {
  // Read before acceptTokenHeader puts the access token in its place.
  const users = new WeakMap<object, string>();
  app.addHook('onRequest', (request, _reply, done) => {
    const user = basicUser(request.headers.authorization);
    if (user !== null) users.set(request.raw, user);
    done();
  });
  acceptTokenHeader(app, 'x-access-token');
  answerE2bErrors(app);
  acceptRawBodies(app);

  /** The running runtime the request names, of the caller's tenant; E2B's 502 otherwise. */
  const callerOf = async (req: FastifyRequest): Promise<EnvdCaller> => {
    const id = req.headers['e2b-sandbox-id'];
    if (typeof id !== 'string' || id === '') throw invalidArgument('the E2b-Sandbox-Id header names no sandbox');
    const port = req.headers['e2b-sandbox-port'];
    if (port !== undefined && port !== String(ENVD_PORT)) {
      throw invalidArgument(`only envd's port ${ENVD_PORT} is served here; reach a sandbox's own ports through Vessel's ingress`);
    }
    const rt = await core.runtimes.get(req.principal.tenantId, id).catch((err: unknown) => {
      throw err instanceof VesselError && err.code === 'not_found' ? sandboxGone(id) : err;
    });
    if (rt.status !== 'running') throw sandboxGone(id);
    return { tenantId: rt.tenantId, runtimeId: rt.id, user: users.get(req.raw) ?? null };
  };

  // The Connect handler sees the node request only: the caller found by the route goes with it.
  const callers = new WeakMap<object, EnvdCaller>();
  const CALLER = createContextKey<EnvdCaller | null>(null);
  const callerOfRpc = (ctx: HandlerContext): EnvdCaller => {
    const caller = ctx.values.get(CALLER);
    if (caller === null) throw new Error('an RPC reached its handler without its caller');
    return caller;
  };
  const rpc = connectNodeAdapter({
    routes: (router) => {
      router.service(Process, processService(core, callerOfRpc));
      router.service(Filesystem, filesystemService(core, callerOfRpc));
    },
    requestPathPrefix: app.prefix,
    readMaxBytes: MAX_RPC_BYTES,
    contextValues: (req) => createContextValues().set(CALLER, callers.get(req) ?? null),
  });
  // Each RPC is a route of its own, so the API's guard checks its scope before Connect reads it.
  for (const [path, scope] of Object.entries(RPC_SCOPES)) {
    app.post(path, { config: { scope }, schema: { hide: true } }, async (req, reply) => {
      callers.set(req.raw, await callerOf(req));
      void reply.hijack();
      rpc(req.raw, reply.raw);
    });
  }

  app.get('/health', { config: { scope: 'runtimes:read' }, schema: { hide: true } }, async (req, reply) => {
    await callerOf(req);
    return reply.code(204).send();
  });

  app.get('/files', { config: { scope: 'files:read' }, schema: { hide: true, querystring: FileQuery } }, async (req, reply) => {
    const caller = await callerOf(req);
    const body = await core.files.readFile(caller.tenantId, caller.runtimeId, guestPathOf(req.query.path));
    return reply.type('application/octet-stream').send(body);
  });

  app.post('/files', { config: { scope: 'files:write' }, schema: { hide: true, querystring: FileQuery } }, async (req, reply) => {
    const caller = await callerOf(req);
    const written: Array<{ path: string; name: string; type: 'file' }> = [];
    const write = async (path: string, body: Readable) => {
      await core.files.writeFile(caller.tenantId, caller.runtimeId, path, body, maxFileBytes);
      written.push({ path, name: posix.basename(path), type: 'file' });
    };
    const type = req.headers['content-type'] ?? '';
    if (/^multipart\/form-data/i.test(type)) {
      for (const [name, file] of await formFiles(rawBody(req), type, maxFileBytes + MULTIPART_OVERHEAD_BYTES)) {
        await write(guestPathOf(req.query.path ?? name), Readable.from([Buffer.from(await file.arrayBuffer())]));
      }
    } else {
      if (req.query.path === undefined) throw invalidArgument('an application/octet-stream upload needs the path query parameter');
      await write(guestPathOf(req.query.path), rawBody(req));
    }
    return reply.send(written);
  });
};

/**
 * The `file` parts of a multipart body, by the file name each names (E2B's SDK puts the target path
 * there), read whole up to `maxBytes` (undici's parser takes a whole body).
 */
async function formFiles(body: Readable, contentType: string, maxBytes: number): Promise<Array<[string, File]>> {
  const chunks: Buffer[] = [];
  let size = 0;
  await pipeline(body, async function* (source: AsyncIterable<Buffer>) {
    for await (const chunk of source) {
      size += chunk.length;
      if (size > maxBytes) throw new VesselError('invalid_argument', `the upload is larger than ${maxBytes} bytes`, { httpStatus: 413 });
      chunks.push(chunk);
    }
  });
  let form: FormData;
  try {
    form = await new Response(Buffer.concat(chunks), { headers: { 'content-type': contentType } }).formData();
  } catch {
    throw invalidArgument('the multipart body is malformed');
  }
  const files: Array<[string, File]> = [];
  for (const value of form.getAll('file')) {
    if (typeof value === 'string') throw invalidArgument("a 'file' part carries no file");
    files.push([value.name, value]);
  }
  if (files.length === 0) throw invalidArgument("the multipart body has no 'file' part");
  return files;
}

