/**
 * What a request gets from the rules that match it: each rule's header (replacing the guest's
 * own of that name), its query parameter, and the list of values the response must be redacted
 * of: those of every rule for the request's host, injected into this request or not (an upstream
 * may keep what one request carried and show it in the answer to another). The request target is edited as text, never parsed as a URL: a guest's `//[/x` is a valid
 * origin-form path, but a URL parser reads it as an authority and throws.
 */
import type { InjectionRule } from '../core/types.js';
import { headerValue, paramValue } from '../core/injection.js';
import type { SecretCache } from './secret-cache.js';

export interface Injection {
  /** Header name and value pairs, set after the guest's headers of those names are removed. */
  headers: Array<[string, string]>;
  /** The request target with every injected parameter set. */
  target: string;
  applied: InjectionRule[];
  /** Raw secrets and every value rendered from them, of every rule given: none may reach the guest. */
  values: string[];
}

/** The name of one `name=value` pair of a query, decoded as a server would decode it. */
const pairName = (pair: string): string => new URLSearchParams(pair).keys().next().value ?? '';

/**
 * `target` with parameter `name` set to `value`: any pair of that (decoded) name the guest sent is
 * removed, the others are kept byte for byte, and the new pair is appended form-encoded.
 */
export function withQueryParam(target: string, name: string, value: string): string {
  const q = target.indexOf('?');
  const path = q === -1 ? target : target.slice(0, q);
  const pairs = q === -1 ? [] : target.slice(q + 1).split('&');
  const kept = pairs.filter((pair) => pair !== '' && pairName(pair) !== name);
  kept.push(new URLSearchParams([[name, value]]).toString());
  return `${path}?${kept.join('&')}`;
}

/**
 * The injection of the `rules` for a request's host: those for which `applies` holds (its path
 * matched) are injected; every one's values are listed for redaction. Each secret is read once.
 */
export async function injectionFor(rules: readonly InjectionRule[], applies: (rule: InjectionRule) => boolean, tenantId: string, secrets: SecretCache, target: string): Promise<Injection> {
  const out: Injection = { headers: [], target, applied: [], values: [] };
  for (const rule of rules) {
    const secret = await secrets.get(tenantId, rule.secretId);
    if (secret === null) continue;
    const header = headerValue(rule.injection, secret);
    const param = paramValue(rule.injection, secret);
    out.values.push(secret, header, ...(param === null ? [] : [param]));
    if (!applies(rule)) continue;
    out.headers.push([rule.injection.headerName, header]);
    if (param !== null) out.target = withQueryParam(out.target, rule.injection.paramName!, param);
    out.applied.push(rule);
  }
  return out;
}
