import { Readable } from 'node:stream';
import { Type } from '@sinclair/typebox';
import { DataOf, FileQuery, FileWritten, RuntimeParams } from '../schemas.js';
import { ERROR_RESPONSES, type RoutePlugin } from './common.js';

const tags = ['files'];

/** Its own plugin scope: here, and only here, a body is raw bytes streamed to the guest. */
export const fileRoutes: RoutePlugin<{ maxFileBytes: number }> = async (app, { core, maxFileBytes }) => {
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', (_req, payload, done) => done(null, payload));

  app.get('/v1/runtimes/:runtime_id/files', {
    config: { scope: 'files:read' },
    schema: {
      tags,
      summary: 'Read one file (raw bytes)',
      params: RuntimeParams,
      querystring: FileQuery,
      response: { 200: { description: 'the file', content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } } }, ...ERROR_RESPONSES },
    },
  }, async (req, reply) => {
    const stream = await core.runtimes.readFile(req.principal.tenantId, req.params.runtime_id, req.query.path);
    return reply.type('application/octet-stream').send(stream);
  });

  app.put('/v1/runtimes/:runtime_id/files', {
    config: { scope: 'files:write' },
    schema: {
      tags,
      summary: 'Write one file from the raw request body; parents are created',
      params: RuntimeParams,
      querystring: FileQuery,
      response: { 200: DataOf(Type.Ref(FileWritten)), ...ERROR_RESPONSES },
    },
  }, async (req) => {
    const body = req.body as Readable | undefined;
    const size = await core.runtimes.writeFile(req.principal.tenantId, req.params.runtime_id, req.query.path, body ?? Readable.from([]), maxFileBytes);
    return { data: { path: req.query.path, size_bytes: size } };
  });
};

