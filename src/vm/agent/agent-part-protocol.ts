/**
 * What the service and the agent's process (agent-process.ts) say to each other over their link,
 * beyond the method names: the shapes both sides share. Everything the process sends is checked
 * by the service (src/vm/agent-replies.ts) as coming from one that may have been taken over.
 */
import type { ErrorCode } from '../../core/errors.js';
import type { GuestFileType } from '../../core/types.js';
import type { PartUser } from '../../platform/part-process.js';

export interface AgentPartSettings {
  user: PartUser;
  logLevel: string;
}

/**
 * Why a call failed: the API's own error, a refusal of the guest's, the channel (unavailable), or
 * no connection to the runtime held here at all (unavailable too, and the service hands over a
 * new one on the next request).
 */
export type ErrorDetail = { kind: 'vessel'; code: ErrorCode; httpStatus: number } | { kind: 'refused' } | { kind: 'transport' } | { kind: 'disconnected' };

/** A process output chunk's meta: channel (0 stdout, 1 stderr), offset, bytes lost before it. */
export type OutputMeta = [0 | 1, number, number];

/** A directory entry as a listing page carries it: name, type, size, mode, modified (RFC 3339). */
export type ListingEntry = [string, GuestFileType, number, number, string];

/** A listing page's size, about: pages are a stream's chunks, well inside its window. */
export const LISTING_PAGE_BYTES = 64 * 1024;
