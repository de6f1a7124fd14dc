/**
 * The runtime's ingress URLs, as the service computes them (the Runtime's ingress_urls; docs/api.md,
 * "Ingress URLs"): each port it serves, at `<port>-<runtime id>.<domain>` on the ingress listener.
 * Only the id routes, never the name, so another tenant can never take a URL over. Ports are
 * chosen when the runtime is created.
 */
import { fill, h, table } from '../dom.js';
import type { RuntimeContext, View } from '../view.js';

export function ingressSection(context: RuntimeContext): View {
  const { runtime } = context;
  const specs = runtime.info.ingress_specs;
  const urls = new Map(runtime.info.ingress_urls.map((u) => [u.runtime_port, u.url]));
  const list = table('Ports served at public URLs', ['Port', 'Protocol', 'URL']);
  fill(
    list.body,
    specs.map((spec) => {
      const url = urls.get(spec.runtime_port) ?? null;
      return h(
        'tr',
        {},
        h('th', { scope: 'row' }, String(spec.runtime_port)),
        h('td', {}, spec.protocol),
        h('td', {}, url === null ? 'the service runs no ingress' : h('a', { href: url, target: '_blank', rel: 'noopener noreferrer' }, url)),
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
