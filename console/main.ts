/**
 * The console's entry: signs in, then shows the view the URL's hash names, one at a time. Plain
 * DOM and one module per view: the console has a dozen screens of forms and tables, which a
 * framework would not make shorter, and the page stays one small bundle beside xterm.js.
 */
import type { Vessel } from 'vessel/client';
import { TOKEN_REFUSED, announce, guardUnavailableButtons } from './dom.js';
import { parseRoute, type Route } from './router.js';
import { restore, signOut } from './session.js';
import type { View } from './view.js';
import { runtimePage, type RuntimePage } from './views/runtime.js';
import { runtimesView } from './views/runtimes.js';
import { secretsView } from './views/secrets.js';
import { signInView } from './views/sign-in.js';

const main = document.getElementById('main')!;
const nav = document.getElementById('site-nav')!;
const signOutButton = document.getElementById('sign-out') as HTMLButtonElement;

let vessel: Vessel | null = restore();
let current: View | null = null;
/** The runtime page shown, if one is: it keeps itself across its sections. */
let page: RuntimePage | null = null;

function show(view: View, runtime: RuntimePage | null = null): void {
  current?.dispose();
  current = view;
  page = runtime;
  main.replaceChildren(view.element);
}

/** Moves focus to the new view's heading, as a page load would put a screen reader at the top. */
function focusHeading(): void {
  const heading = main.querySelector<HTMLElement>('h1');
  if (heading === null) return;
  heading.tabIndex = -1;
  heading.focus({ preventScroll: false });
}

async function render(route: Route, focus: boolean): Promise<void> {
  const signedIn = vessel !== null;
  nav.hidden = !signedIn;
  signOutButton.hidden = !signedIn;
  if (vessel === null) {
    show(
      signInView((client) => {
        vessel = client;
        void render(parseRoute(location.hash) ?? { view: 'runtimes' }, true);
      }),
    );
    focusHeading();
    return;
  }
  for (const link of nav.querySelectorAll<HTMLAnchorElement>('a[data-section]')) {
    const active = link.dataset.section === (route.view === 'secrets' ? 'secrets' : 'runtimes');
    if (active) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  if (route.view === 'runtime') {
    if (page?.runtimeName === route.runtime) return page.showSection(route.section);
    const next = runtimePage(vessel, route.runtime, route.section);
    show(next, next);
  } else if (route.view === 'secrets') {
    show(secretsView(vessel));
  } else {
    show(runtimesView(vessel));
  }
  if (focus) focusHeading();
}

window.addEventListener('hashchange', () => {
  const route = parseRoute(location.hash);
  // An in-page link (the skip link) is not a route: stay where we are.
  if (route !== null) void render(route, true);
});

document.getElementById('skip-link')!.addEventListener('click', (event) => {
  event.preventDefault();
  main.focus();
});

const leave = (): void => {
  signOut();
  vessel = null;
  void render(parseRoute(location.hash) ?? { view: 'runtimes' }, true);
};
signOutButton.addEventListener('click', leave);
document.addEventListener(TOKEN_REFUSED, () => {
  if (vessel === null) return;
  leave();
  announce('The service no longer accepts this token: sign in again.');
});

guardUnavailableButtons();
void render(parseRoute(location.hash) ?? { view: 'runtimes' }, false);
