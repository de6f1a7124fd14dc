/** Answers for requests no route takes: 405 with `Allow` when the path exists under other methods, else 404. */
import type { FastifyInstance } from 'fastify';
import { VesselError } from '../core/errors.js';
import { sendError } from './errors.js';

export function answerUnrouted(app: FastifyInstance): void {
  const patterns: Array<{ method: string; re: RegExp }> = [];
  app.addHook('onRoute', (route) => {
    const re = new RegExp('^' + route.url.replace(/:[^/]+/g, '[^/]+') + '/?$');
    for (const method of [route.method].flat()) patterns.push({ method, re });
  });
  app.setNotFoundHandler(async (request, reply) => {
    const path = request.url.split('?', 1)[0]!;
    const allowed = [...new Set(patterns.filter((r) => r.re.test(path)).map((r) => r.method))];
    if (allowed.length > 0) {
      void reply.header('allow', allowed.join(', '));
      return sendError(reply, new VesselError('invalid_argument', `method ${request.method} is not allowed on ${path}`, { httpStatus: 405 }));
    }
    return sendError(reply, new VesselError('not_found', `no route for ${request.method} ${path}`));
  });
}
