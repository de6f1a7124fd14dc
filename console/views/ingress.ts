/**
 * The runtime's ingress URLs: each port it serves, at `<port>-<runtime id>.<domain>` on the
 * service's ingress listener (docs/network.md, "Ingress"). Only the id routes, never the name, so
 * another tenant can never take a URL over. Ports are chosen when the runtime is created.
 */
import { fill, h, table } from '../dom.js';
import type { RuntimeContext, View } from '../view.js';

export function ingressUrl(spec: { protocol: string; runtime_port: number }, runtimeId: string, ingress: { domain: string; port: number }): string {
  const defaultPort = spec.protocol === 'https' ? 443 : 80;
  const port = ingress.port === defaultPort ? '' : `:${ingress.port}`;
  return `${spec.protocol}://${spec.runtime_port}-${runtimeId}.${ingress.domain}${port}/`;
}

export function ingressSection(context: RuntimeContext): View {
  const { runtime, ingress } = context;
  const specs = runtime.info.ingress_specs;
  const list = table('Ports served at public URLs', ['Port', 'Protocol', 'URL']);
  fill(
    list.body,
    specs.map((spec) => {
      const url = ingress === null ? null : ingressUrl(spec, runtime.id, ingress);
      return h(
        'tr',
        {},
        h('th', { scope: 'row' }, String(spec.runtime_port)),
        h('td', {}, spec.protocol),
        h('td', {}, url === null ? 'the service did not say where ingress listens' : h('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, url)),
      );
    }),
  );
  const element = h(
    'section',
    { class: 'ingress' },
    h('h2', {}, 'Ingress'),
    specs.length === 0 ? h('p', { class: 'empty' }, 'This runtime serves no port: give ingress ports when you create a runtime.') : list.element,
    h('p', { class: 'hint' }, 'Anyone who has a URL can reach its port: ingress takes no token. The program in the runtime must listen on the port, on any address (0.0.0.0).'),
  );
  return { element, dispose() {} };
}
