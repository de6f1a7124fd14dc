import { invalidArgument } from './errors.js';

const DISPLAY_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const isUuid = (s: string): boolean => UUID.test(s);

/** Names share the path segment with IDs, so a UUID-shaped name would make lookups ambiguous. */
export function checkDisplayName(name: string, field = 'display_name'): string {
  if (!DISPLAY_NAME.test(name)) {
    throw invalidArgument(`${field} must match ${DISPLAY_NAME.source}`);
  }
  if (isUuid(name)) throw invalidArgument(`${field} must not be shaped like a UUID`);
  return name;
}

/**
 * An image reference as docker pull takes it (`debian:12`, `registry.example.com:5000/team/app:tag`,
 * `…@sha256:<hex>`): no transport of the caller's choice, no option (`-…`), no spaces.
 */
export const IMAGE_REFERENCE = /^[a-z0-9][a-z0-9._-]*(:[0-9]+)?(\/[a-z0-9._-]+)*(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[0-9a-f]{64})?$/i;
export const MAX_IMAGE_REFERENCE_CHARS = 512;

export function checkImageReference(reference: string, field = 'image'): string {
  if (reference.length > MAX_IMAGE_REFERENCE_CHARS || !IMAGE_REFERENCE.test(reference)) {
    throw invalidArgument(`${field} must be an image reference such as debian:12 or registry.example.com/team/app:tag (at most ${MAX_IMAGE_REFERENCE_CHARS} characters)`);
  }
  return reference;
}
