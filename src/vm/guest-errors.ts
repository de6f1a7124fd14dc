/**
 * What the agent's failure on a guest path means for the API caller. Files (guest-files.ts) and
 * directories (guest-directories.ts) share it, so one errno reads the same on every route.
 */
import { VesselError, failedPrecondition, invalidArgument, notFound, unavailable } from '../core/errors.js';
import { AgentError, AgentProtocolError } from './agent/agent-client.js';

/** Linux errnos the agent reports (its ERROR carries the guest's errno). */
const E = {
  EPERM: 1,
  ENOENT: 2,
  EIO: 5,
  EACCES: 13,
  EBUSY: 16,
  ENOTDIR: 20,
  EISDIR: 21,
  EINVAL: 22,
  ENOSPC: 28,
  EROFS: 30,
  ENAMETOOLONG: 36,
  ENOTEMPTY: 39,
  ELOOP: 40,
  EDQUOT: 122,
} as const;

/**
 * What the operation needed `path` to be. ENOTDIR and EINVAL mean different things to a file
 * read (a parent is not a directory; the path is a FIFO or a device) than to a listing or a
 * mkdir, where the path itself may be the non-directory.
 */
export type GuestObject = 'file' | 'directory' | 'path';

export const diskFull = (): VesselError => failedPrecondition(`the runtime's disk is full`);

/**
 * A reply the guest had no business sending (a name over NAME_MAX, a time before 1970, more than
 * its bound): the runtime is unavailable for this request, which says why; the client has ended
 * that channel and the next request reconnects. Anything else is returned as it is.
 */
export function agentFailure(err: unknown): unknown {
  if (!(err instanceof AgentProtocolError)) return err;
  return unavailable(`the runtime's guest agent broke the protocol, so its channel was reset: ${err.message}`);
}

/** The API error for `err`, or `err` itself when it is no refusal of the guest's (a lost channel: the driver's to judge). */
export function guestPathError(err: unknown, path: string, object: GuestObject): unknown {
  // A path the agent's frame cannot carry (over 4095 bytes once in UTF-8).
  if (err instanceof RangeError) return invalidArgument(`path '${path.slice(0, 64)}…' is too long for the guest`);
  if (!(err instanceof AgentError) || err.kind !== 'ERRNO') return agentFailure(err);
  switch (err.errno) {
    case E.ENOENT:
      return notFound(object, path);
    case E.EISDIR:
      return invalidArgument(`'${path}' is a directory, not a regular file`);
    case E.ENOTDIR:
      return invalidArgument(object === 'file' ? `a parent of '${path}' is not a directory` : `'${path}' or one of its parents is not a directory`);
    case E.EINVAL:
      return invalidArgument(object === 'file' ? `'${path}' is not a regular file` : `'${path}' cannot be used here: ${err.detail}`);
    case E.ENAMETOOLONG:
      return invalidArgument(`'${path}' has a name too long for the guest's file system`);
    case E.ELOOP:
      return invalidArgument(`'${path}' goes through too many symbolic links`);
    case E.ENOTEMPTY:
      return failedPrecondition(`directory '${path}' is not empty; remove it with recursive=true`);
    case E.EBUSY:
      return failedPrecondition(`'${path}' is in use (a mount point?): ${err.detail}`);
    case E.EACCES:
    case E.EPERM:
    case E.EROFS:
      return failedPrecondition(`'${path}' cannot be accessed: ${err.detail}`);
    case E.ENOSPC:
    case E.EDQUOT:
      return diskFull();
    case E.EIO:
      return failedPrecondition(`'${path}' could not be written to the runtime's disk: ${err.detail}`);
    default:
      return err;
  }
}
