/** A runtime's status as a word with a colour: the word carries the meaning, the colour only helps. */
import type { RuntimeInfo } from 'vessel/client';
import { h } from '../dom.js';

const TONE: Record<RuntimeInfo['status'], string> = {
  running: 'good',
  creating: 'busy',
  deleting: 'busy',
  paused: 'idle',
  suspended: 'idle',
  shutdown: 'idle',
  error: 'bad',
  crashed: 'bad',
  // Its VM host lost its lease: not known to be gone, not known to run.
  unavailable: 'bad',
};

export function statusBadge(status: RuntimeInfo['status'], message?: string): HTMLElement {
  return h('span', { class: `status ${TONE[status]}`, 'data-status': status, title: message }, status, message === undefined ? null : h('span', { class: 'visually-hidden' }, `: ${message}`));
}
