/** Secret injection configuration: validation and the value templates. Pure. */
import { invalidArgument } from './errors.js';
import type { InjectionConfig } from './types.js';

const HTTP_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Headers that frame or route the request; letting a rule set them would enable smuggling. */
const FORBIDDEN_HEADERS = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'proxy-connection',
  'proxy-authenticate',
  'proxy-authorization',
  'te',
  'trailer',
  'upgrade',
  'expect',
]);

const TEMPLATE_TOKENS = /\$\{credential\}|\{value\}/g;

export function checkInjectionConfig(config: InjectionConfig): InjectionConfig {
  if (!HTTP_TOKEN.test(config.headerName)) {
    throw invalidArgument(`injection.headerName '${config.headerName}' is not a valid HTTP header name`);
  }
  if (FORBIDDEN_HEADERS.has(config.headerName.toLowerCase())) {
    throw invalidArgument(`injection.headerName '${config.headerName}' is a hop-by-hop or framing header and cannot be injected`);
  }
  for (const field of ['valueFormat', 'paramFormat', 'value'] as const) {
    const v = config[field];
    if (v !== undefined && /[\r\n\0]/.test(v)) throw invalidArgument(`injection.${field} must not contain CR, LF or NUL`);
  }
  return config;
}

export const renderTemplate = (template: string, secret: string): string => template.replace(TEMPLATE_TOKENS, () => secret);

/** The header value: valueFormat, else value, else the raw secret. */
export const headerValue = (config: InjectionConfig, secret: string): string =>
  renderTemplate(config.valueFormat ?? config.value ?? '${credential}', secret);

/** The query parameter value, or null when the rule sets no parameter. */
export const paramValue = (config: InjectionConfig, secret: string): string | null =>
  config.paramName === undefined ? null : renderTemplate(config.paramFormat ?? config.value ?? '${credential}', secret);
