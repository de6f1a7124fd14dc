/**
 * E2B compatibility (docs/e2b.md): E2B's control plane under /e2b and envd's data plane under
 * /e2b-envd, both on the API port, both over the core as Vessel's own API is.
 */
import type { RoutePlugin } from '../api/routes/common.js';
import { e2bControlPlane } from './control-plane.js';
import { e2bEnvd } from './envd.js';
import { E2B_API_PREFIX, E2B_ENVD_PREFIX } from './addresses.js';

export { E2B_API_PREFIX, E2B_ENVD_PREFIX } from './addresses.js';

export const e2bRoutes: RoutePlugin<{ maxFileBytes: number }> = async (app, { core, maxFileBytes }) => {
  await app.register(e2bControlPlane, { core, prefix: E2B_API_PREFIX });
  await app.register(e2bEnvd, { core, maxFileBytes, prefix: E2B_ENVD_PREFIX });
};
