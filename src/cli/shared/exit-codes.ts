/**
 * The exit statuses of the client commands, in one place: docs/cli.md's table is checked against
 * EXIT_CODES by test/unit/cli-shared.test.ts. A script branches on the kind of failure
 * (retry on 6, create on 3) without parsing messages; exec and shell pass the command's own
 * status through, so theirs are only the CLI's when the command never ran.
 */
import type { ErrorCode } from 'vessel/client';
// The SDK's error class alone: the SDK itself is loaded only by a command that calls the service.
import { VesselError } from '../../../client/errors.js';

export const EXIT = {
  ok: 0,
  failure: 1,
  usage: 2,
  notFound: 3,
  denied: 4,
  conflict: 5,
  unavailable: 6,
  /** As timeout(1) reports a command it killed. */
  timedOut: 124,
  /** As a shell reports a command it could not find. */
  notStarted: 127,
  interrupted: 130,
} as const;

/** Every error code the API can answer with, mapped; the type makes a new code a compile error here. */
export const EXIT_CODES: Record<ErrorCode, number> = {
  invalid_argument: EXIT.usage,
  not_found: EXIT.notFound,
  unauthenticated: EXIT.denied,
  permission_denied: EXIT.denied,
  already_exists: EXIT.conflict,
  failed_precondition: EXIT.conflict,
  unavailable: EXIT.unavailable,
  rate_limited: EXIT.unavailable,
  deadline_exceeded: EXIT.timedOut,
  command_failed: EXIT.notStarted,
  internal: EXIT.failure,
  unimplemented: EXIT.failure,
};

/** A failure of the CLI itself, with the status it exits with. */
export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number = EXIT.failure,
  ) {
    super(message);
    this.name = 'CliError';
  }
}

/** The command line asked for something the CLI cannot do as asked. */
export class UsageError extends CliError {
  constructor(message: string) {
    super(message, EXIT.usage);
    this.name = 'UsageError';
  }
}

export function exitCodeOf(err: unknown): number {
  if (err instanceof VesselError) return EXIT_CODES[err.code] ?? EXIT.failure;
  if (err instanceof CliError) return err.exitCode;
  return EXIT.failure;
}
