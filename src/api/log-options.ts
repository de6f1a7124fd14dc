/**
 * The service's pino options, shared by `vessel serve` and the tests that check what its log
 * holds. The service never puts a bearer token in a log line; redaction is the second line of
 * defence, for the places one could be: a request's Authorization header, and any field named
 * `token` (a new token's value is one in the API's reply, never in a log object), and a path
 * (maskTokens).
 */
import type { LoggerOptions } from 'pino';

export const LOG_REDACT_PATHS = ['req.headers.authorization', 'headers.authorization', 'token', '*.token'];

export const serviceLogOptions = (level: string): LoggerOptions => ({ level, redact: { paths: LOG_REDACT_PATHS, censor: '[redacted]' } });

/**
 * A path with any token-shaped part (`vsl_…`) masked, for the request log: a client that pastes
 * a token where an id goes (`GET /v1/tokens/vsl_…`) must not leave it in the service's log.
 */
export const maskTokens = (text: string): string => text.replace(/vsl_[A-Za-z0-9_-]*/g, 'vsl_[redacted]');
