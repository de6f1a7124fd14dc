/**
 * Checkpoints: capture this runtime, fork a new runtime from a checkpoint, delete one. The
 * tenant's checkpoints are listed, those of this runtime marked (any of them can be forked), and
 * those still being captured polled until they settle.
 */
import type { Checkpoint } from 'vessel/client';
import { ErrorBox, announce, confirmed, field, fill, formatBytes, h, nameInput, onSubmit, redrawKeepingFocus, table, time, whileBusy } from '../dom.js';
import { poll } from '../poll.js';
import { go } from '../router.js';
import type { RuntimeContext, View } from '../view.js';

/** Which runtime a checkpoint was captured from, as this runtime's page says it. */
export const sourceOf = (checkpoint: Checkpoint, runtimeId: string): string =>
  checkpoint.source_runtime_id === runtimeId ? 'this runtime' : checkpoint.source_runtime_id === null ? '' : `runtime ${checkpoint.source_runtime_id.slice(0, 8)}`;

export function checkpointsSection(context: RuntimeContext): View {
  const { vessel, runtime } = context;
  const errors = new ErrorBox();
  const name = nameInput('name', false);
  const capture = h('button', { type: 'submit' }, 'Create checkpoint');
  const forkFrom = h('select', { name: 'checkpoint', required: true });
  const forkName = nameInput('fork-name', true);
  const fork = h('button', { type: 'submit' }, 'Fork');
  const list = table('Checkpoints of this tenant, newest first', ['Name', 'From', 'State', 'Memory', 'Created', 'Actions']);
  let checkpoints: Checkpoint[] = [];
  let drawn: string | null = null;

  const draw = (): void => {
    const chosen = forkFrom.value;
    const ready = checkpoints.filter((c) => c.state === 'ready');
    fill(forkFrom, ready.length === 0 ? h('option', { value: '' }, 'No checkpoint is ready') : ready.map((c) => h('option', { value: c.id, selected: c.id === chosen }, c.display_name)));
    fill(
      list.body,
      checkpoints.length === 0
        ? h('tr', {}, h('td', { colspan: 6, class: 'empty' }, 'No checkpoints yet.'))
        : checkpoints.map((checkpoint) => {
            const forkThis = h('button', { type: 'button', class: 'secondary small', 'data-key': `fork:${checkpoint.id}`, 'aria-label': `Fork ${checkpoint.display_name}…`, hidden: checkpoint.state !== 'ready' }, 'Fork…');
            forkThis.addEventListener('click', () => {
              forkFrom.value = checkpoint.id;
              forkName.focus();
            });
            const remove = h('button', { type: 'button', class: 'danger small', 'data-key': `delete:${checkpoint.id}`, 'aria-label': `Delete ${checkpoint.display_name}` }, 'Delete');
            remove.addEventListener('click', () => {
              if (!confirmed(`Delete checkpoint '${checkpoint.display_name}'? Runtimes forked from it keep running.`)) return;
              void whileBusy(remove, errors, `Could not delete ${checkpoint.display_name}`, async () => {
                await vessel.checkpoints.delete(checkpoint.id);
                announce(`Deleted checkpoint ${checkpoint.display_name}.`);
                poller.now();
              });
            });
            const state = checkpoint.state_message === undefined ? checkpoint.state : `${checkpoint.state}: ${checkpoint.state_message}`;
            return h(
              'tr',
              {},
              h('th', { scope: 'row' }, checkpoint.display_name),
              h('td', {}, sourceOf(checkpoint, runtime.id)),
              h('td', {}, h('span', { class: `state ${checkpoint.state}` }, state)),
              h('td', {}, formatBytes(checkpoint.resources.limits.memory_mib * 1024 * 1024)),
              h('td', {}, time(checkpoint.created_at)),
              h('td', { class: 'row-actions' }, forkThis, remove),
            );
          }),
    );
  };

  // Polled while the section is open: a capture takes seconds, and its state changes meanwhile.
  const poller = poll(async (signal) => {
    try {
      const listed = await vessel.checkpoints.list({ signal }).toArray();
      errors.clear();
      if (JSON.stringify(listed) === drawn) return;
      drawn = JSON.stringify(listed);
      checkpoints = listed;
      redrawKeepingFocus(element, draw);
    } catch (error) {
      if (!signal.aborted) errors.show(error, 'Could not list the checkpoints');
      throw error;
    }
  });

  const createForm = h('form', { class: 'row' }, field('Checkpoint name', name, 'Optional; the service names it otherwise.'), h('div', { class: 'actions' }, capture));
  onSubmit(createForm, capture, errors, 'Could not create a checkpoint', async () => {
    const checkpoint = await runtime.checkpoint(name.value.trim() === '' ? {} : { name: name.value.trim() });
    name.value = '';
    announce(`Checkpoint ${checkpoint.display_name} is ${checkpoint.state}.`);
    checkpoints = [checkpoint, ...checkpoints.filter((c) => c.id !== checkpoint.id)];
    draw();
    poller.now();
  });

  const forkForm = h('form', { class: 'row' }, field('Checkpoint', forkFrom), field('New runtime name', forkName), h('div', { class: 'actions' }, fork));
  onSubmit(forkForm, fork, errors, 'Could not fork', async () => {
    const forked = await vessel.runtimes.fork(forkFrom.value, { display_name: forkName.value.trim() });
    announce(`Runtime ${forked.name} is ${forked.status}.`);
    go({ view: 'runtime', runtime: forked.name, section: 'terminal' });
  });

  const element = h(
    'section',
    { class: 'checkpoints' },
    h('h2', {}, 'Checkpoints'),
    h('h3', {}, `Capture ${runtime.name}`),
    createForm,
    h('h3', {}, 'Fork a new runtime'),
    forkForm,
    errors.element,
    list.element,
  );
  return { element, dispose: () => poller.stop() };
}
