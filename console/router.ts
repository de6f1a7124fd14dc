/**
 * Routes live in the URL's hash (#/runtimes/NAME/files), so that the service serves one page for
 * all of them, and back, forward and bookmarks work. Nothing secret is ever put in a route.
 */

export const RUNTIME_SECTIONS = ['terminal', 'files', 'exec', 'egress', 'ingress', 'audits', 'checkpoints'] as const;
export type RuntimeSection = (typeof RUNTIME_SECTIONS)[number];

export type Route = { view: 'runtimes' } | { view: 'secrets' } | { view: 'runtime'; runtime: string; section: RuntimeSection };

export const DEFAULT_ROUTE: Route = { view: 'runtimes' };

/** The route a hash names; null for a hash that is not a route (an in-page link like #main). */
export function parseRoute(hash: string): Route | null {
  if (hash === '' || hash === '#') return DEFAULT_ROUTE;
  if (!hash.startsWith('#/')) return null;
  const [first, name, section] = hash.slice(2).split('/').map(decodeURIComponent);
  if (first === 'secrets') return { view: 'secrets' };
  if (first === 'runtimes' && name !== undefined && name !== '') {
    const known = RUNTIME_SECTIONS.find((s) => s === section);
    return { view: 'runtime', runtime: name, section: known ?? 'terminal' };
  }
  return DEFAULT_ROUTE;
}

export function href(route: Route): string {
  switch (route.view) {
    case 'runtimes':
      return '#/runtimes';
    case 'secrets':
      return '#/secrets';
    case 'runtime':
      return `#/runtimes/${encodeURIComponent(route.runtime)}/${route.section}`;
  }
}

export const go = (route: Route): void => {
  location.hash = href(route);
};
