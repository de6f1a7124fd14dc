/** The flags of a runtime's labels and lifecycle settings, for create and patch, and how `get` shows them. */
import { Option, type Command } from 'commander';
import type { RuntimeCreateRequest, RuntimeInfo } from 'vessel/client';
import { collect, durationOr, keyValue } from '../shared/parse.js';

export interface SettingsFlags {
  label?: Record<string, string>;
  idleTimeout?: number | 'never' | 'default';
  onIdle?: 'suspend' | 'stop';
  autoDelete?: number | 'never';
}

export function withSettingsOptions(command: Command, labelHelp: string): Command {
  return command
    .option('--label <key=value>', labelHelp, keyValue)
    .option('--idle-timeout <duration>', 'after this long without activity (90, 15m, 2h), on-idle applies; never, or default for the service\'s', durationOr('never', 'default'))
    .addOption(new Option('--on-idle <action>', 'what idling does: suspend (resume brings it back) or stop').choices(['suspend', 'stop']))
    .option('--auto-delete <duration>', 'delete it this long after it stops running (0 for at once), or never', durationOr('never'));
}

/** The lifecycle fields the flags give; undefined when none. */
export function lifecycleBody(flags: SettingsFlags): RuntimeCreateRequest['lifecycle'] {
  const lifecycle = {
    ...(flags.idleTimeout === undefined ? {} : { idle_timeout_secs: flags.idleTimeout === 'never' ? 0 : flags.idleTimeout === 'default' ? null : flags.idleTimeout }),
    ...(flags.onIdle === undefined ? {} : { on_idle: flags.onIdle }),
    ...(flags.autoDelete === undefined ? {} : { auto_delete_secs: flags.autoDelete === 'never' ? null : flags.autoDelete }),
  };
  return Object.keys(lifecycle).length === 0 ? undefined : lifecycle;
}

/** A create's labels and lifecycle. */
export function settingsBody(flags: SettingsFlags): Pick<RuntimeCreateRequest, 'labels' | 'lifecycle'> {
  const lifecycle = lifecycleBody(flags);
  return { ...(flags.label === undefined ? {} : { labels: flags.label }), ...(lifecycle === undefined ? {} : { lifecycle }) };
}

/** A patch's labels: the current ones with --label set and --remove-label gone (the API replaces them whole). */
export function patchedLabels(current: RuntimeInfo['labels'], set: Record<string, string> | undefined, remove: string[] | undefined): RuntimeInfo['labels'] | undefined {
  if (set === undefined && remove === undefined) return undefined;
  const labels = { ...current, ...set };
  for (const key of remove ?? []) delete labels[key];
  return labels;
}

export const removeLabelOption = (command: Command): Command => command.option('--remove-label <key>', 'remove a label (repeat for more)', collect);

const secs = (n: number): string => (n % 86400 === 0 ? `${n / 86400}d` : n % 3600 === 0 ? `${n / 3600}h` : n % 60 === 0 ? `${n / 60}m` : `${n}s`);

/** `idle 15m: stop, delete 1d after stopping`, as `get` shows it. */
export function describeLifecycle(l: RuntimeInfo['lifecycle']): string {
  const idle = l.idle_timeout_secs === null ? `idle: service default, then ${l.on_idle}` : l.idle_timeout_secs === 0 ? 'never idles out' : `idle ${secs(l.idle_timeout_secs)}: ${l.on_idle}`;
  const del = l.auto_delete_secs === null ? 'never auto-deleted' : `deleted ${secs(l.auto_delete_secs)} after it stops`;
  return `${idle}; ${del}`;
}

export const describeLabels = (labels: RuntimeInfo['labels']): string | undefined =>
  Object.keys(labels).length === 0 ? undefined : Object.entries(labels).map(([k, v]) => `${k}=${v}`).join(', ');
