import { posix } from 'node:path';
import { Type } from '@sinclair/typebox';
import { DataOf, Empty, FileInfo, FileQuery, FileStat, FileWritten, RemoveQuery, RuntimeParams, StatQuery } from '../schemas.js';
import { acceptRawBodies, binary, rawBody, type RoutePlugin } from './common.js';

const tags = ['files'];
const Written = DataOf(Type.Ref(FileWritten), 'the path and the bytes written');

/** A name any client can save to: the directory's own, without quotes or separators. */
const archiveName = (dir: string): string => `${(posix.basename(dir) || 'root').replace(/[^A-Za-z0-9._-]/g, '_')}.tar`;

/** Its own plugin scope: here, and only here, a body is raw bytes streamed to the guest. */
export const fileRoutes: RoutePlugin<{ maxFileBytes: number }> = async (app, { core, maxFileBytes }) => {
  acceptRawBodies(app);

  app.get('/v1/runtimes/:runtime_id/files', {
    config: { scope: 'files:read', forward: 'runtime' },
    schema: {
      operationId: 'readFile',
      tags,
      summary: 'Read one file (raw bytes)',
      params: RuntimeParams,
      querystring: FileQuery,
      response: { 200: { description: "the file's bytes", ...binary('application/octet-stream') } },
    },
  }, async (req, reply) => {
    const stream = await core.files.readFile(req.principal.tenantId, req.params.runtime_id, req.query.path);
    return reply.type('application/octet-stream').send(stream);
  });

  app.put('/v1/runtimes/:runtime_id/files', {
    config: { scope: 'files:write', forward: 'runtime' },
    schema: {
      operationId: 'writeFile',
      tags,
      summary: 'Write one file from the raw request body (any Content-Type); parents are created',
      params: RuntimeParams,
      querystring: FileQuery,
      body: binary('application/octet-stream'),
      response: { 200: Written },
    },
  }, async (req) => {
    const size = await core.files.writeFile(req.principal.tenantId, req.params.runtime_id, req.query.path, rawBody(req), maxFileBytes);
    return { data: { path: req.query.path, size_bytes: size } };
  });

  app.delete('/v1/runtimes/:runtime_id/files', {
    config: { scope: 'files:write', forward: 'runtime' },
    schema: {
      operationId: 'removePath',
      tags,
      summary: 'Remove a file, a symbolic link (not its target) or an empty directory; a whole tree with recursive=true',
      params: RuntimeParams,
      querystring: RemoveQuery,
      response: { 200: Empty('the path is gone') },
    },
  }, async (req) => {
    await core.files.removePath(req.principal.tenantId, req.params.runtime_id, req.query.path, req.query.recursive ?? false);
    return { data: {} };
  });

  app.get('/v1/runtimes/:runtime_id/files/list', {
    config: { scope: 'files:read', forward: 'runtime' },
    schema: {
      operationId: 'listDir',
      tags,
      summary: "List a directory's entries (not . and ..), sorted by name; symbolic links are not followed",
      params: RuntimeParams,
      querystring: FileQuery,
      response: { 200: DataOf(Type.Array(Type.Ref(FileInfo)), "the directory's entries") },
    },
  }, async (req) => ({ data: await core.files.listDir(req.principal.tenantId, req.params.runtime_id, req.query.path) }));

  app.get('/v1/runtimes/:runtime_id/files/stat', {
    config: { scope: 'files:read', forward: 'runtime' },
    schema: {
      operationId: 'statPath',
      tags,
      summary: 'Describe one path',
      params: RuntimeParams,
      querystring: StatQuery,
      response: { 200: DataOf(Type.Ref(FileStat), 'what the path is') },
    },
  }, async (req) => ({ data: await core.files.statPath(req.principal.tenantId, req.params.runtime_id, req.query.path, req.query.follow_symlinks ?? true) }));

  app.post('/v1/runtimes/:runtime_id/files/mkdir', {
    config: { scope: 'files:write', forward: 'runtime' },
    schema: {
      operationId: 'makeDir',
      tags,
      summary: 'Make a directory and its missing parents (mkdir -p); an existing directory is fine',
      params: RuntimeParams,
      querystring: FileQuery,
      response: { 200: DataOf(Type.Object({ path: Type.String() }), 'the directory') },
    },
  }, async (req) => {
    await core.files.makeDir(req.principal.tenantId, req.params.runtime_id, req.query.path);
    return { data: { path: req.query.path } };
  });

  app.get('/v1/runtimes/:runtime_id/files/archive', {
    config: { scope: 'files:read', forward: 'runtime' },
    schema: {
      operationId: 'downloadArchive',
      tags,
      summary: "Download a directory's contents as a tar archive (streamed; a failure midway breaks the transfer)",
      params: RuntimeParams,
      querystring: FileQuery,
      response: {
        200: {
          description: 'the tar archive of the directory, entries relative to it (./…)',
          headers: { 'Content-Disposition': { type: 'string', description: 'attachment; filename="<directory>.tar"' } },
          ...binary('application/x-tar'),
        },
      },
    },
  }, async (req, reply) => {
    const archive = await core.files.readArchive(req.principal.tenantId, req.params.runtime_id, req.query.path);
    return reply.type('application/x-tar').header('content-disposition', `attachment; filename="${archiveName(req.query.path)}"`).send(archive);
  });

  app.put('/v1/runtimes/:runtime_id/files/archive', {
    config: { scope: 'files:write', forward: 'runtime' },
    schema: {
      operationId: 'uploadArchive',
      tags,
      summary: 'Extract a tar archive from the raw request body (any Content-Type) into a directory, which is created with its parents',
      params: RuntimeParams,
      querystring: FileQuery,
      body: binary('application/x-tar'),
      response: { 200: Written },
    },
  }, async (req) => {
    const size = await core.files.writeArchive(req.principal.tenantId, req.params.runtime_id, req.query.path, rawBody(req), maxFileBytes);
    return { data: { path: req.query.path, size_bytes: size } };
  });
};
