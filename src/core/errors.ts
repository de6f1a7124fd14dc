/**
 * The one error catalogue: every failure the service reports is a VesselError carrying one of
 * the spec's error codes. The HTTP status for each code lives here too, so the API, the
 * OpenAPI document and the docs cannot drift apart (test/unit/errors.test.ts checks that).
 */
export const ERROR_STATUS = {
  invalid_argument: 400,
  unauthenticated: 401,
  permission_denied: 403,
  not_found: 404,
  already_exists: 409,
  failed_precondition: 409,
  command_failed: 422,
  rate_limited: 429,
  internal: 500,
  unimplemented: 501,
  unavailable: 503,
  deadline_exceeded: 504,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;
export const ERROR_CODES = Object.keys(ERROR_STATUS) as ErrorCode[];

export class VesselError extends Error {
  readonly code: ErrorCode;
  /** Overrides the catalogue status for the three HTTP refinements of invalid_argument (405, 413, 415). */
  readonly httpStatus: number;
  readonly retryAfterSecs: number | undefined;

  constructor(code: ErrorCode, message: string, opts: { httpStatus?: number; retryAfterSecs?: number; cause?: unknown } = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'VesselError';
    this.code = code;
    this.httpStatus = opts.httpStatus ?? ERROR_STATUS[code];
    this.retryAfterSecs = opts.retryAfterSecs;
  }
}

export const invalidArgument = (message: string) => new VesselError('invalid_argument', message);
export const notFound = (kind: string, ref: string) => new VesselError('not_found', `${kind} '${ref}' not found`);
export const alreadyExists = (kind: string, name: string) =>
  new VesselError('already_exists', `${kind} named '${name}' already exists`);
export const failedPrecondition = (message: string) => new VesselError('failed_precondition', message);
export const unavailable = (message: string) => new VesselError('unavailable', message);
export const internal = (message: string, cause?: unknown) => new VesselError('internal', message, { cause });
