/** An API node's hop client for tests without TLS: every host's key from the fleet secret, plain HTTP. */
import { FleetKeys } from '../../src/cluster/fleet-keys.js';
import type { HopClient } from '../../src/cluster/hop-proxy.js';

export const plainHopClient = (fleetSecret: string): HopClient & { keys: FleetKeys } => ({ keys: new FleetKeys(fleetSecret), tls: null, plainRefusal: async () => null });
