/**
 * Where E2B's SDK reaches Vessel (docs/e2b.md): the paths of the two facades on the API port, and
 * envd's port, which the SDK names for every envd call and the ingress hands to the API. A module
 * of constants alone, so that the service's root process (which configures the ingress) loads
 * nothing of the facades.
 */
export const E2B_API_PREFIX = '/e2b';
export const E2B_ENVD_PREFIX = '/e2b-envd';
/** envd's own port: the one the SDK names in E2b-Sandbox-Port and in `49983-<id>.<domain>`. */
export const ENVD_PORT = 49983;
