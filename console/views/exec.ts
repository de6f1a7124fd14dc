/**
 * Runs one command and shows its output as it comes (the SDK's streamed exec), stderr marked
 * apart, then its exit status. Stop ends the request, and the service kills the command's tree.
 */
import { ErrorBox, field, h, setAvailable } from '../dom.js';
import type { RuntimeContext, View } from '../view.js';

/** Output kept on screen; older text is dropped from the top, as a terminal scrolls it away. */
const MAX_SHOWN_CHARS = 1024 * 1024;

export function execSection(context: RuntimeContext): View {
  const errors = new ErrorBox();
  const command = h('input', { name: 'command', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'uname -a' });
  const cwd = h('input', { name: 'cwd', autocomplete: 'off', spellcheck: 'false', placeholder: '/root' });
  const timeout = h('input', { name: 'timeout', type: 'number', min: 1, value: 60 });
  const run = h('button', { type: 'submit' }, 'Run');
  const stop = h('button', { type: 'button', class: 'secondary', 'aria-disabled': 'true' }, 'Stop');
  const output = h('pre', { class: 'output', tabindex: 0, 'aria-label': 'Output' });
  const result = h('p', { class: 'exec-result', role: 'status' });
  /** Aborting it ends the request, which kills the command. */
  let running: AbortController | null = null;
  let shown = 0;

  const show = (text: string, channel: 'stdout' | 'stderr'): void => {
    output.append(channel === 'stderr' ? h('span', { class: 'stderr' }, text) : text);
    shown += text.length;
    while (shown > MAX_SHOWN_CHARS && output.firstChild !== null) {
      shown -= output.firstChild.textContent?.length ?? 0;
      output.firstChild.remove();
    }
    output.scrollTop = output.scrollHeight;
  };

  const form = h(
    'form',
    { class: 'card' },
    h('div', { class: 'row' }, field('Command', command, 'Run by /bin/sh -c in the runtime.'), field('Working directory', cwd), field('Timeout (seconds)', timeout)),
    h('div', { class: 'actions' }, run, stop),
  );
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    if (running !== null) return;
    const abort = (running = new AbortController());
    errors.clear();
    output.replaceChildren();
    shown = 0;
    result.textContent = 'Running…';
    setAvailable(run, false);
    setAvailable(stop, true);
    void (async () => {
      try {
        const body = { command: command.value, ...(cwd.value.trim() === '' ? {} : { cwd: cwd.value.trim() }), timeout_secs: timeout.valueAsNumber || 60 };
        const stream = await context.runtime.execStream(body, { signal: abort.signal, onStdout: (text) => show(text, 'stdout'), onStderr: (text) => show(text, 'stderr') });
        const exit = await stream.wait();
        result.textContent = `Exit status ${exit.exit_code}, in ${exit.duration_ms} ms.`;
      } catch (error) {
        result.textContent = abort.signal.aborted ? 'Stopped: the command was killed.' : '';
        if (!abort.signal.aborted) errors.show(error, 'The command failed');
      } finally {
        running = null;
        setAvailable(run, true);
        setAvailable(stop, false);
      }
    })();
  });
  stop.addEventListener('click', () => running?.abort());

  const element = h('section', { class: 'exec' }, h('h2', {}, 'Exec'), form, errors.element, result, output);
  return { element, dispose: () => running?.abort() };
}
