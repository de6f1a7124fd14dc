/**
 * What a VM host makes its own hops with (moves, checkpoint-moves.ts and runtime-moves.ts): the
 * grants that came with the request it serves (fleet-keys.ts), and its fleet certificate.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { HostGrants } from './fleet-keys.js';
import type { HopTls } from './fleet-tls.js';
import type { HopClient } from './hop-proxy.js';

/** A VM host's side of the hop, as the API's composition gives it: its key, its name, its TLS. */
export interface HostHop {
  /** This host's own key (VESSEL_NODE_KEY, or derived from the fleet secret on a host given that). */
  secret: string;
  node: string;
  /** Its certificate: the hop is served and called over TLS; absent on a host without one. */
  tls?: HopTls | null | undefined;
}

export function hostClient(hop: HostHop, headers: IncomingHttpHeaders): HopClient {
  const tls = hop.tls ?? null;
  return {
    keys: HostGrants.of(hop.secret, headers),
    tls,
    // A host on TLS sends a move's files to no host over plain HTTP.
    plainRefusal: async (target) => (tls === null ? null : `this VM host serves the hop over TLS, and VM host '${target.name}' registered a plain http:// address`),
  };
}
