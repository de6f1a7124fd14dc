/**
 * A login shell in the runtime, in xterm.js, over the SDK's terminal WebSocket (authenticated by
 * the bearer subprotocol: docs/processes.md, "Terminals"). The terminal fills its panel and tells
 * the shell its size whenever the panel changes.
 *
 * A terminal takes Tab for itself (completion), so keyboard users would be trapped in it: F6, the
 * usual key for moving between parts of a window, leaves it for its toolbar.
 */
import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import type { Terminal as Shell } from 'vessel/client';
import { ErrorBox, field, h, setAvailable } from '../dom.js';
import type { RuntimeContext, View } from '../view.js';
import { openWithAdoptedStyles } from '../xterm-styles.js';

const THEME = { background: '#14181f', foreground: '#e6e9ef', cursor: '#f5c542', selectionBackground: '#3a4a63' };

interface Session {
  terminal: Terminal;
  shell: Shell | null;
  dispose(): void;
}

export function terminalSection(context: RuntimeContext): View {
  const { runtime } = context;
  const errors = new ErrorBox();
  const state = h('p', { class: 'terminal-state', role: 'status' }, 'Not connected.');
  const toggle = h('button', { type: 'button' }, 'Connect');
  const readerMode = h('input', { type: 'checkbox' });
  const hint = h('p', { class: 'hint', id: 'terminal-hint' }, 'Keys go to the shell, Tab too. Press F6 to leave the terminal.');
  const screen = h('div', { class: 'terminal-screen' });
  let session: Session | null = null;
  /** A shell is open or opening; after it ends, its last screen stays until the next connect. */
  let live = false;
  const setLive = (value: boolean): void => {
    live = value;
    toggle.textContent = value ? 'Disconnect' : 'Connect';
  };

  const end = (): void => {
    session?.dispose();
    session = null;
    setLive(false);
  };

  const connect = async (): Promise<void> => {
    end();
    errors.clear();
    screen.replaceChildren();
    const terminal = new Terminal({
      cursorBlink: true,
      fontFamily: 'ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace',
      fontSize: 14,
      // Room below the baseline: DejaVu Sans Mono's underscore is cut off at 1.0.
      lineHeight: 1.2,
      scrollback: 5000,
      screenReaderMode: readerMode.checked,
      theme: THEME,
    });
    const fit = new FitAddon();
    terminal.loadAddon(fit);
    const styles = openWithAdoptedStyles(terminal, screen);
    terminal.textarea?.setAttribute('aria-describedby', hint.id);
    terminal.attachCustomKeyEventHandler((event) => {
      if (event.key !== 'F6') return true;
      if (event.type === 'keydown') {
        event.preventDefault();
        toggle.focus();
      }
      return false;
    });
    fit.fit();
    const resizes = new ResizeObserver(() => fit.fit());
    resizes.observe(screen);
    const current: Session = {
      terminal,
      shell: null,
      dispose() {
        resizes.disconnect();
        void this.shell?.close();
        terminal.dispose();
        styles.dispose();
      },
    };
    session = current;
    setLive(true);
    state.textContent = 'Connecting…';
    try {
      const shell = await runtime.terminal({ rows: terminal.rows, cols: terminal.cols, onData: (bytes) => terminal.write(bytes) });
      if (session !== current) return void shell.close();
      current.shell = shell;
      terminal.onData((data) => shell.write(data));
      terminal.onResize(({ rows, cols }) => shell.resize(rows, cols));
      state.textContent = `Connected to ${runtime.name}.`;
      terminal.focus();
      const exit = await shell.wait();
      if (session !== current) return;
      state.textContent = exit.exit_code === null ? 'Disconnected.' : `The shell exited with status ${exit.exit_code}.`;
      current.shell = null;
      setLive(false);
    } catch (error) {
      if (session !== current) return;
      errors.show(error, 'Could not open a terminal');
      state.textContent = 'Not connected.';
      end();
    }
  };

  toggle.addEventListener('click', () => {
    if (live) {
      end();
      state.textContent = 'Disconnected.';
    } else {
      void connect();
    }
  });
  readerMode.addEventListener('change', () => {
    if (session !== null) session.terminal.options.screenReaderMode = readerMode.checked;
  });

  const available = (): boolean => runtime.status === 'running';
  const unsubscribe = context.onUpdate(() => {
    setAvailable(toggle, available() || live);
    if (!available() && !live) state.textContent = `The runtime is ${runtime.status}: start or resume it to open a terminal.`;
  });
  if (available()) void connect();
  else {
    setAvailable(toggle, false);
    state.textContent = `The runtime is ${runtime.status}: start or resume it to open a terminal.`;
  }

  const element = h(
    'section',
    { class: 'terminal-section' },
    h('h2', {}, 'Terminal'),
    h('div', { class: 'toolbar' }, toggle, state, field('Screen reader mode', readerMode)),
    hint,
    errors.element,
    screen,
  );
  return {
    element,
    dispose() {
      unsubscribe();
      end();
    },
  };
}
