/**
 * The few DOM helpers every view uses. Text goes in as text nodes, never as markup: names, paths,
 * command output and audit fields come from the API and from guests, which are not trusted.
 */
import { VesselError } from 'vessel/client';

type Child = Node | string | number | null | undefined | false;
type AttrValue = string | number | boolean | null | undefined;
export type Attrs = Record<string, AttrValue | ((event: Event) => void)>;

/** An element with attributes (`on…` are listeners; false or null leaves one out) and children. */
export function h<K extends keyof HTMLElementTagNameMap>(tag: K, attrs: Attrs = {}, ...children: Array<Child | Child[]>): HTMLElementTagNameMap[K] {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (typeof value === 'function') element.addEventListener(name.slice(2), value);
    else if (value === true) element.setAttribute(name, '');
    else if (value !== false && value !== null && value !== undefined) element.setAttribute(name, String(value));
  }
  append(element, children);
  return element;
}

function append(parent: Element, children: Array<Child | Child[]>): void {
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    parent.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces an element's children. */
export function fill(parent: Element, ...children: Array<Child | Child[]>): void {
  parent.replaceChildren();
  append(parent, children);
}

/**
 * Redraws `container`, and gives the focus back to the control with the same data-key if the
 * redraw took it away (a poll must not throw the keyboard's place to the top of the page). When
 * that control is gone (its row was deleted), the container itself takes the focus.
 */
export function redrawKeepingFocus(container: HTMLElement, redraw: () => void): void {
  const active = document.activeElement;
  const had = active instanceof HTMLElement && container.contains(active);
  const key = had ? active.dataset.key : undefined;
  redraw();
  if (!had || container.contains(document.activeElement)) return;
  const again = key === undefined ? null : container.querySelector<HTMLElement>(`[data-key="${CSS.escape(key)}"]`);
  if (again !== null) return again.focus();
  container.tabIndex = -1;
  container.focus();
}

let lastId = 0;
/** A document-unique id, to tie a label or a description to its control. */
export const uid = (prefix: string): string => `${prefix}-${++lastId}`;

/**
 * A labelled control: a real <label> for it, and a hint read out with it (aria-describedby).
 * Checkboxes put their label after the box, as people expect to click it.
 */
export function field(label: string, control: HTMLInputElement | HTMLSelectElement | HTMLTextAreaElement, hint?: string): HTMLElement {
  control.id ||= uid('field');
  const labelElement = h('label', { for: control.id }, label);
  const hintElement = hint === undefined ? null : h('p', { class: 'hint', id: uid('hint') }, hint);
  if (hintElement !== null) control.setAttribute('aria-describedby', hintElement.id);
  const checkbox = control instanceof HTMLInputElement && control.type === 'checkbox';
  return h('div', { class: checkbox ? 'field checkbox' : 'field' }, checkbox ? [control, labelElement] : [labelElement, control], hintElement);
}

/** What to tell a person about a failure: the service's message and code. */
export function describeError(error: unknown): string {
  if (error instanceof VesselError) return `${error.message} (${error.code}${error.status === 0 ? '' : `, HTTP ${error.status}`})`;
  if (error instanceof Error) return error.message;
  return String(error);
}

/** The event an ErrorBox sends when the service refused the token. */
export const TOKEN_REFUSED = 'vessel:token-refused';

/** An alert that stays empty, and silent, until there is something wrong to say. */
export class ErrorBox {
  readonly element = h('div', { class: 'error', role: 'alert' });

  show(error: unknown, doing?: string): void {
    fill(this.element, doing === undefined ? describeError(error) : `${doing}: ${describeError(error)}`);
    // A token revoked (or a service whose data was reset) while signed in: main.ts signs out.
    if (error instanceof VesselError && error.code === 'unauthenticated') document.dispatchEvent(new CustomEvent(TOKEN_REFUSED));
  }

  clear(): void {
    this.element.replaceChildren();
  }
}

/** Says something to screen readers without moving focus (the page's polite live region). */
export function announce(text: string): void {
  const region = document.getElementById('announcer');
  if (region === null) return;
  // The same words twice are read twice only if the region changes in between.
  region.textContent = '';
  requestAnimationFrame(() => (region.textContent = text));
}

/**
 * Marks a button unavailable without disabling it: a disabled button drops the keyboard's focus to
 * the page when it changes under it (a Stop that ends its own runtime), and cannot be found by
 * Tab. guardUnavailableButtons() makes such buttons inert.
 */
export function setAvailable(button: HTMLButtonElement, available: boolean): void {
  if (available) button.removeAttribute('aria-disabled');
  else button.setAttribute('aria-disabled', 'true');
}

/** Swallows clicks (and the implicit submit of Enter) on buttons marked aria-disabled. */
export function guardUnavailableButtons(): void {
  document.addEventListener(
    'click',
    (event) => {
      if (!(event.target instanceof Element) || event.target.closest('button[aria-disabled="true"]') === null) return;
      event.preventDefault();
      event.stopImmediatePropagation();
    },
    true,
  );
}

/**
 * Runs `work` with the button unavailable and marked busy, so that a slow VM operation cannot
 * be started twice; errors go to `errors`. Resolves to whether it succeeded.
 */
export async function whileBusy(button: HTMLButtonElement, errors: ErrorBox, doing: string, work: () => Promise<unknown>): Promise<boolean> {
  const wasAvailable = button.getAttribute('aria-disabled') !== 'true';
  setAvailable(button, false);
  button.setAttribute('aria-busy', 'true');
  errors.clear();
  try {
    await work();
    return true;
  } catch (error) {
    errors.show(error, doing);
    return false;
  } finally {
    button.removeAttribute('aria-busy');
    if (wasAvailable) setAvailable(button, true);
  }
}

/** Handles a form's submit by script, never by the browser's navigation, with its button busy meanwhile. */
export function onSubmit(form: HTMLFormElement, button: HTMLButtonElement, errors: ErrorBox, doing: string, work: () => Promise<unknown>, after?: (ok: boolean) => void): void {
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    void whileBusy(button, errors, doing, work).then(after);
  });
}

/** A display name's rule (docs/api.md, "Identifiers"), checked by the browser before the API does. */
const NAME_PATTERN = '[A-Za-z0-9][A-Za-z0-9._\\-]{0,127}';

/** A text field for a display name. */
export const nameInput = (name: string, required: boolean): HTMLInputElement =>
  h('input', { name, required, pattern: NAME_PATTERN, maxlength: 128, autocomplete: 'off', spellcheck: 'false' });

const UNITS = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
export function formatBytes(bytes: number): string {
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < UNITS.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(value < 10 ? 1 : 0)} ${UNITS[unit]}`;
}

const TIME = new Intl.DateTimeFormat(undefined, { dateStyle: 'medium', timeStyle: 'medium' });
/** A timestamp as the reader's locale writes it, with the exact instant in a <time>. */
export const time = (iso: string): HTMLTimeElement => h('time', { datetime: iso }, TIME.format(new Date(iso)));

/** A table with a caption and column headers; rows are filled by the caller. */
export function table(caption: string, columns: string[]): { element: HTMLTableElement; body: HTMLTableSectionElement; caption: HTMLTableCaptionElement } {
  const captionElement = h('caption', {}, caption);
  const body = h('tbody');
  const element = h('table', {}, captionElement, h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)))), body);
  return { element, body, caption: captionElement };
}

/** Confirms a destructive action with the browser's own dialog, which every assistive technology knows. */
export const confirmed = (question: string): boolean => window.confirm(question);
