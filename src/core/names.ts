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
