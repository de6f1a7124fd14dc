/**
 * Where the outside reaches a runtime's ports: `<protocol>://<runtime_port>-<runtime id>.<domain>[:port]/`
 * on the ingress listener (docs/network.md, "Ingress"; src/net/ingress.ts parses the same names).
 * Only the id routes, never the display name, so the URL cannot be taken by another tenant.
 */
import type { IngressSpec, Runtime } from './types.js';

/**
 * Where clients reach the service's ingress: the configured domain and port, for both protocols;
 * or, behind a proxy of the operator's (VESSEL_INGRESS_PUBLIC_URL), the proxy's domain and the
 * port it serves `scheme` on, the other protocol on its standard port.
 */
export interface IngressAddress {
  domain: string;
  port: number;
  /** The protocol `port` is for; absent: both. */
  scheme?: 'http' | 'https' | undefined;
}

const DEFAULT_PORT = { http: 80, https: 443 } as const;

export function ingressUrl(spec: IngressSpec, runtimeId: string, address: IngressAddress): string {
  const at = address.scheme === undefined || address.scheme === spec.protocol ? address.port : DEFAULT_PORT[spec.protocol];
  const port = at === DEFAULT_PORT[spec.protocol] ? '' : `:${at}`;
  return `${spec.protocol}://${spec.runtime_port}-${runtimeId}.${address.domain.toLowerCase()}${port}/`;
}

/**
 * VESSEL_INGRESS_PUBLIC_URL (`https://sandbox.example.com`, a port allowed): the origin the
 * operator's proxy serves runtime URLs under, as an address for ingressUrl.
 */
export function publicIngressAddress(text: string): IngressAddress {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new Error(`VESSEL_INGRESS_PUBLIC_URL: '${text.slice(0, 80)}' is not a URL`);
  }
  const scheme = url.protocol === 'https:' ? 'https' : url.protocol === 'http:' ? 'http' : null;
  const plain = url.username === '' && url.password === '' && url.pathname === '/' && url.search === '' && url.hash === '';
  if (scheme === null || !plain || url.hostname.startsWith('[') || /^[\d.]+$/.test(url.hostname)) {
    throw new Error(`VESSEL_INGRESS_PUBLIC_URL: '${text.slice(0, 80)}' must be http:// or https:// and a domain (runtimes are its subdomains), with no path, query or credentials`);
  }
  return { domain: url.hostname.replace(/\.$/, ''), port: url.port === '' ? DEFAULT_PORT[scheme] : Number(url.port), scheme };
}

/** One per ingress spec, in their order; none when the service runs no ingress. */
export const ingressUrls = (rt: Pick<Runtime, 'id' | 'ingressSpecs'>, address: IngressAddress | null) =>
  address === null ? [] : rt.ingressSpecs.map((spec) => ({ runtime_port: spec.runtime_port, protocol: spec.protocol, url: ingressUrl(spec, rt.id, address) }));
