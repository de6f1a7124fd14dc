/**
 * Where the outside reaches a runtime's ports: `<protocol>://<runtime_port>-<runtime id>.<domain>[:port]/`
 * on the ingress listener (docs/network.md, "Ingress"; src/net/ingress.ts parses the same names).
 * Only the id routes, never the display name, so the URL cannot be taken by another tenant.
 */
import type { IngressSpec, Runtime } from './types.js';

/** Where the service's ingress listener is reached: the configured domain and port. */
export interface IngressAddress {
  domain: string;
  port: number;
}

const DEFAULT_PORT = { http: 80, https: 443 } as const;

export function ingressUrl(spec: IngressSpec, runtimeId: string, address: IngressAddress): string {
  const port = address.port === DEFAULT_PORT[spec.protocol] ? '' : `:${address.port}`;
  return `${spec.protocol}://${spec.runtime_port}-${runtimeId}.${address.domain.toLowerCase()}${port}/`;
}

/** One per ingress spec, in their order; none when the service runs no ingress. */
export const ingressUrls = (rt: Pick<Runtime, 'id' | 'ingressSpecs'>, address: IngressAddress | null) =>
  address === null ? [] : rt.ingressSpecs.map((spec) => ({ runtime_port: spec.runtime_port, protocol: spec.protocol, url: ingressUrl(spec, rt.id, address) }));
