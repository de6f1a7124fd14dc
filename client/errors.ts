/**
 * The SDK's one error type. Whatever went wrong (an error envelope from the service, a response
 * that is not one, a connection that failed), the caller catches a VesselError and branches on
 * `.code`, the spec's error code.
 */
import type { components } from './generated/openapi.js';

export type ErrorCode = components['schemas']['ErrorEnvelope']['error']['code'];

/**
 * For answers that carry no envelope (a proxy's 502 page, an upgrade refused before the
 * WebSocket opened): the code the service itself would have used for that status.
 */
const CODE_OF_STATUS: Record<number, ErrorCode> = {
  400: 'invalid_argument',
  401: 'unauthenticated',
  403: 'permission_denied',
  404: 'not_found',
  405: 'invalid_argument',
  409: 'failed_precondition',
  413: 'invalid_argument',
  415: 'invalid_argument',
  422: 'command_failed',
  429: 'rate_limited',
  501: 'unimplemented',
  502: 'unavailable',
  503: 'unavailable',
  504: 'deadline_exceeded',
};

export const codeOfStatus = (status: number): ErrorCode => CODE_OF_STATUS[status] ?? (status >= 500 ? 'internal' : 'invalid_argument');

export interface VesselErrorDetails {
  /** The HTTP status; 0 when no response came (the connection failed) or the error came inside a stream. */
  status: number;
  /** The service's x-request-id for the request, to find it in the service's log. */
  requestId?: string | undefined;
  /** How long the service asked to wait (rate_limited, unavailable). */
  retryAfterSecs?: number | undefined;
  cause?: unknown;
}

export class VesselError extends Error {
  readonly code: ErrorCode;
  readonly status: number;
  readonly requestId: string | undefined;
  readonly retryAfterSecs: number | undefined;

  constructor(code: ErrorCode, message: string, details: VesselErrorDetails) {
    super(message, details.cause === undefined ? undefined : { cause: details.cause });
    this.name = 'VesselError';
    this.code = code;
    this.status = details.status;
    this.requestId = details.requestId;
    this.retryAfterSecs = details.retryAfterSecs;
  }
}

const isEnvelope = (body: unknown): body is components['schemas']['ErrorEnvelope'] => {
  const error = (body as { error?: { code?: unknown; message?: unknown } } | null)?.error;
  return typeof error?.code === 'string' && typeof error.message === 'string';
};

/** Retry-After in seconds; an HTTP date is turned into the seconds left until it. */
function retryAfterSecs(header: string | null): number | undefined {
  if (header === null) return undefined;
  const trimmed = header.trim();
  if (/^\d+$/.test(trimmed)) return Number(trimmed);
  const at = Date.parse(trimmed);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** The error a failed response stands for; `body` is what openapi-fetch parsed of it. */
export function errorFromResponse(response: Response, body: unknown): VesselError {
  const details = {
    status: response.status,
    requestId: response.headers.get('x-request-id') ?? undefined,
    retryAfterSecs: retryAfterSecs(response.headers.get('retry-after')),
  };
  if (isEnvelope(body)) return new VesselError(body.error.code, body.error.message, details);
  const text = typeof body === 'string' && body.length > 0 ? `: ${body.slice(0, 200)}` : '';
  return new VesselError(codeOfStatus(response.status), `HTTP ${response.status} without an error envelope${text}`, details);
}

/** An error event inside a stream that had already answered 200. */
export function errorFromEvent(body: unknown, requestId: string | undefined): VesselError {
  if (isEnvelope(body)) return new VesselError(body.error.code, body.error.message, { status: 0, requestId });
  return new VesselError('internal', 'the stream reported an error without an envelope', { status: 0, requestId });
}

/** A request that got no response at all: unavailable, as far as a caller can tell. */
export function connectionError(cause: unknown): VesselError {
  // fetch's own message is only "fetch failed"; what failed (ECONNREFUSED, a reset) is its cause's.
  const reason = (cause as { cause?: { code?: string; message?: string } } | null)?.cause;
  const detail = reason?.code ?? reason?.message;
  const message = `${(cause as Error | null)?.message ?? String(cause)}${detail === undefined ? '' : ` (${detail})`}`;
  return new VesselError('unavailable', `no response from the service: ${message}`, { status: 0, cause });
}
