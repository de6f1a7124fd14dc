/** Maps anything thrown during a request to the error envelope and its HTTP status. */
import type { FastifyError, FastifyReply, FastifyRequest, FastifyServerOptions } from 'fastify';
import { VesselError } from '../core/errors.js';
import { lingerIfBodyPending } from './linger.js';

/** Fastify's own request errors that are the caller's fault, with the status DESIGN.md allows. */
const FRAMEWORK_ERRORS: Record<string, { status: number; message?: string }> = {
  FST_ERR_CTP_BODY_TOO_LARGE: { status: 413, message: 'request body is too large' },
  FST_ERR_CTP_INVALID_MEDIA_TYPE: { status: 415, message: 'unsupported Content-Type; this route takes application/json' },
  FST_ERR_CTP_EMPTY_JSON_BODY: { status: 400, message: 'request body is empty but Content-Type is application/json' },
  // Node's JSON.parse messages quote the body, which may hold a secret value: never pass them on.
  FST_ERR_CTP_INVALID_JSON_BODY: { status: 400, message: 'request body is not valid JSON' },
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: { status: 400, message: 'Content-Length does not match the body' },
};

export function toVesselError(err: unknown): VesselError {
  if (err instanceof VesselError) return err;
  const fe = err as Partial<FastifyError> & { validation?: unknown };
  if (fe.validation !== undefined) return new VesselError('invalid_argument', fe.message ?? 'invalid request');
  const known = fe.code === undefined ? undefined : FRAMEWORK_ERRORS[fe.code];
  if (known !== undefined) return new VesselError('invalid_argument', known.message ?? fe.message ?? '', { httpStatus: known.status });
  if (err instanceof SyntaxError || (fe.statusCode !== undefined && fe.statusCode >= 400 && fe.statusCode < 500)) {
    // Body parsers' errors: keep our own words for them, for the same reason as above.
    return new VesselError('invalid_argument', 'malformed request', { httpStatus: fe.statusCode === 413 ? 413 : 400 });
  }
  return new VesselError('internal', 'internal error', { cause: err });
}

export function sendError(reply: FastifyReply, error: VesselError): FastifyReply {
  // A refusal may come while the client is still sending its body: it must reach the client.
  lingerIfBodyPending(reply);
  if (error.retryAfterSecs !== undefined) void reply.header('retry-after', String(error.retryAfterSecs));
  if (error.code === 'unauthenticated') void reply.header('www-authenticate', 'Bearer');
  return reply.code(error.httpStatus).type('application/json').send({ error: { code: error.code, message: error.message } });
}

export function errorHandler(this: unknown, err: unknown, request: FastifyRequest, reply: FastifyReply): FastifyReply {
  const error = toVesselError(err);
  if (error.code === 'internal') {
    // Details of unexpected failures go to the log, never to the caller.
    request.log.error({ err: error.cause ?? err }, 'request failed');
  } else if (error.httpStatus >= 500) {
    request.log.warn({ code: error.code, msg: error.message }, 'request failed');
  }
  return sendError(reply, error);
}

/**
 * Router-level failures (malformed URL, over-long path parameter) reach neither the error handler
 * nor the hooks: they get the envelope and the request id here. Every path parameter is an
 * identifier, so one too long to exist is simply not found.
 */
export const frameworkErrors: NonNullable<FastifyServerOptions['frameworkErrors']> = (err, req, reply) => {
  const tooLong = err.code === 'FST_ERR_MAX_PARAM_LENGTH';
  void reply.header('x-request-id', req.id);
  void sendError(reply, new VesselError(tooLong ? 'not_found' : 'invalid_argument', tooLong ? 'no object has an identifier that long' : 'malformed URL'));
};
