/** How a request's parts are read: its JSON body, and the validation of body, query and path against each route's schema. */
import type { FastifyInstance } from 'fastify';
import { Ajv, type Options as AjvOptions } from 'ajv';
import addFormats from 'ajv-formats';
import { SHARED_SCHEMAS } from './schemas.js';

function makeAjv(options: AjvOptions): Ajv {
  const ajv = new Ajv({ strict: false, useDefaults: true, allErrors: false, ...options });
  (addFormats as unknown as (a: Ajv) => void)(ajv);
  for (const schema of SHARED_SCHEMAS) ajv.addSchema(schema);
  return ajv;
}

export function parseRequests(app: FastifyInstance): void {
  // Bodies are typed exactly; query strings and paths are text and may be coerced.
  const bodyAjv = makeAjv({ coerceTypes: false, removeAdditional: false });
  // 'array': a query parameter given once is a list of one (`?label=a` as well as `?label=a&label=b`).
  const textAjv = makeAjv({ coerceTypes: 'array', removeAdditional: false });
  // A raw body (a tar archive) is a stream for the handler: its schema is there for OpenAPI only.
  const raw = () => true;
  app.setValidatorCompiler(({ schema, httpPart, contentType }) => {
    if (httpPart !== 'body') return textAjv.compile(schema);
    return contentType === undefined || contentType === 'application/json' ? bodyAjv.compile(schema) : raw;
  });

  // An empty body is fine for operations that take none, even when a client labels it JSON.
  const defaultJson = app.getDefaultJsonParser('error', 'error');
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '' || body === undefined) return done(null, undefined);
    void defaultJson(req, body as string, done);
  });
  for (const schema of SHARED_SCHEMAS) app.addSchema(schema);
}
