/** What `vessel serve` (serve.ts) gives the API's process (api-process.ts) when it starts it. */
import type { PartUser } from '../platform/part-process.js';
import type { Config } from './config.js';

/** `all`: today's single host; `api` and `node`: the two halves of a fleet (docs/scaling.md). */
export const ROLES = ['all', 'api', 'node'] as const;
export type Role = (typeof ROLES)[number];

/**
 * What a fleet member needs: the shared PostgreSQL, and its keys. An API node holds the fleet
 * secret. A VM host holds its own key (VESSEL_NODE_KEY, from `vessel node enroll`), or, not
 * enrolled, the fleet secret it derives its key from (and then serves the hop without TLS).
 */
export interface FleetKeySettings {
  secret?: string;
  /** This VM host's own key. */
  nodeKey?: string;
  /** Whether the host is enrolled (given its own key): TLS, and none of the fleet secret. */
  enrolled: boolean;
}

export interface ApiPartSettings {
  config: Config;
  role: Role;
  fleet: FleetKeySettings | null;
  /** The master key, base64: the service read it from its file or the environment; none on an enrolled VM host. */
  masterKey: string | null;
  adminToken: string;
  /** A fleet host's identity (its file is in the data directory, root's): which process holds its name's lease. */
  hostId: string | null;
  user: PartUser;
  /** The guest image's static vessel-agent, for templates' guest kit; null where no VMs run (an API node). */
  guestAgent: string | null;
}
