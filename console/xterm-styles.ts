/**
 * xterm.js computes some of its CSS (cell sizes from the measured font, theme colours) and writes
 * it into <style> elements it makes and appends while it opens. The console's
 * Content-Security-Policy (style-src 'self', no inline styles: src/api/console.ts) refuses those,
 * and xterm.js has no nonce option. Scripts may still make constructed stylesheets, so the
 * terminal is opened with its <style> elements kept out of the document (the policy never sees
 * them), and the text xterm.js writes into each is mirrored into a sheet the document adopts.
 */
import type { Terminal } from '@xterm/xterm';

export interface AdoptedStyles {
  dispose(): void;
}

/** Opens `terminal` in `container`, its styles adopted rather than inline. */
export function openWithAdoptedStyles(terminal: Terminal, container: HTMLElement): AdoptedStyles {
  const sheets = new Map<HTMLStyleElement, { sheet: CSSStyleSheet; observer: MutationObserver }>();
  const adopt = (style: HTMLStyleElement): void => {
    if (sheets.has(style)) return;
    const sheet = new CSSStyleSheet();
    sheet.replaceSync(style.textContent ?? '');
    // A detached element is still observed: xterm.js keeps its reference and writes on.
    const observer = new MutationObserver(() => sheet.replaceSync(style.textContent ?? ''));
    observer.observe(style, { childList: true, characterData: true, subtree: true });
    sheets.set(style, { sheet, observer });
    document.adoptedStyleSheets = [...document.adoptedStyleSheets, sheet];
    style.remove();
  };

  // Only for the synchronous open(): xterm.js 6 appends its <style> elements with appendChild.
  const kept: HTMLStyleElement[] = [];
  // Kept to be called with its `this` (.call) and put back below.
  // eslint-disable-next-line @typescript-eslint/unbound-method
  const appendChild = Node.prototype.appendChild;
  Node.prototype.appendChild = function <T extends Node>(this: Node, child: T): T {
    if (child instanceof HTMLStyleElement) {
      kept.push(child);
      return child;
    }
    return appendChild.call(this, child) as T;
  };
  try {
    terminal.open(container);
  } finally {
    Node.prototype.appendChild = appendChild;
  }
  kept.forEach(adopt);
  // Should a later xterm.js insert one some other way, it is adopted all the same.
  const watcher = new MutationObserver(() => container.querySelectorAll('style').forEach(adopt));
  watcher.observe(container, { childList: true, subtree: true });

  return {
    dispose() {
      watcher.disconnect();
      const ours = new Set<CSSStyleSheet>();
      for (const { sheet, observer } of sheets.values()) {
        observer.disconnect();
        ours.add(sheet);
      }
      sheets.clear();
      document.adoptedStyleSheets = document.adoptedStyleSheets.filter((sheet) => !ours.has(sheet));
    },
  };
}
