/**
 * The signed-in token. Kept in sessionStorage only: it goes when the tab closes, is never shared
 * with other tabs or written to disk as localStorage would be, and never enters a URL (routes
 * are in the hash, and the terminal's WebSocket carries it in a subprotocol).
 */
import { Vessel, VesselError } from 'vessel/client';

const TOKEN_KEY = 'vessel.token';

/** The API is the service that serves this page: /console/'s parent, wherever it is mounted. */
export const serviceUrl = (): string => new URL('../', location.href).href;

export const clientFor = (token: string): Vessel => new Vessel({ url: serviceUrl(), token });

export function restore(): Vessel | null {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token === null ? null : clientFor(token);
}

/**
 * Checks the token with one cheap read and keeps it. A token without the runtimes:read scope is
 * still a good token: the views it cannot read say so.
 */
export async function signIn(token: string): Promise<Vessel> {
  const vessel = clientFor(token);
  try {
    await vessel.runtimes.list({ limit: 1 }).pages().next();
  } catch (error) {
    if (!(error instanceof VesselError && error.code === 'permission_denied')) throw error;
  }
  sessionStorage.setItem(TOKEN_KEY, token);
  return vessel;
}

export function signOut(): void {
  sessionStorage.removeItem(TOKEN_KEY);
}

