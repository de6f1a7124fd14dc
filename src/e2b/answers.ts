/**
 * How the E2B facade authenticates and answers, on top of the API's own guard and error handler:
 *
 * - E2B's SDK sends its API key as `X-API-Key` (control plane) and the sandbox's access token as
 *   `X-Access-Token` (envd); both are Vessel tokens here, so the facade hands them to the API's
 *   guard as the bearer token it reads. Rate limits, scopes and tenancy then apply as they do to
 *   the native API.
 * - E2B's error body is `{"code": <HTTP status>, "message": …}`, and its SDK tells errors apart by
 *   that code (404: not found, 401: authentication); Vessel's envelope is rewritten to it.
 * - Connect-RPC calls fail with Connect's codes, chosen as envd's SDK maps them back.
 */
import { Code, ConnectError } from '@connectrpc/connect';
import type { FastifyInstance } from 'fastify';
import { VesselError, type ErrorCode } from '../core/errors.js';

/**
 * The header that carries the caller's Vessel token on this part of the facade. It wins over an
 * Authorization header: envd's SDK sends `Authorization: Basic <user>:` to name the user a
 * command runs as, which is no credential.
 */
export function acceptTokenHeader(app: FastifyInstance, header: 'x-api-key' | 'x-access-token'): void {
  // An instance hook: it runs before the route's own hooks, the guard among them.
  app.addHook('onRequest', (request, _reply, done) => {
    const value = request.headers[header];
    if (typeof value === 'string') request.headers.authorization = `Bearer ${value}`;
    done();
  });
}

/** Rewrites the API's error envelope to E2B's on every answer of `app`'s routes (the guard's refusals too). */
export function answerE2bErrors(app: FastifyInstance): void {
  app.addHook('onSend', (_request, reply, payload, done) => {
    if (reply.statusCode < 400 || typeof payload !== 'string') return done(null, payload);
    let message: unknown;
    try {
      message = (JSON.parse(payload) as { error?: { message?: unknown } }).error?.message;
    } catch {
      return done(null, payload);
    }
    done(null, JSON.stringify({ code: reply.statusCode, message: typeof message === 'string' ? message : 'request failed' }));
  });
}

/** E2B's 404 for a sandbox id: the SDK's SandboxNotFoundError (or `false` from kill). */
export const sandboxNotFound = (id: string) => new VesselError('not_found', `sandbox '${id.slice(0, 80)}' not found`);

/** The Connect code envd's SDK turns into the error class the same failure has with E2B. */
const CONNECT_CODE: Record<ErrorCode, Code> = {
  invalid_argument: Code.InvalidArgument,
  unauthenticated: Code.Unauthenticated,
  permission_denied: Code.PermissionDenied,
  not_found: Code.NotFound,
  already_exists: Code.AlreadyExists,
  failed_precondition: Code.FailedPrecondition,
  command_failed: Code.FailedPrecondition,
  rate_limited: Code.ResourceExhausted,
  internal: Code.Internal,
  unimplemented: Code.Unimplemented,
  unavailable: Code.Unavailable,
  deadline_exceeded: Code.DeadlineExceeded,
};

/** A failure inside an RPC as a ConnectError; anything unexpected is internal, its details kept from the caller. */
export function connectErrorOf(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  if (err instanceof VesselError) return new ConnectError(err.message, CONNECT_CODE[err.code]);
  return new ConnectError('internal error', Code.Internal, undefined, undefined, err);
}
