/**
 * vm.json: what a runtime directory records about its VM, for restarts, checkpoints and the next
 * boot. It is the driver's own file, in a directory only root can write, written atomically and
 * durably; still, it is read as input that may be torn or damaged, and checked field by field,
 * since paths and sizes are derived from it.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Type, type Static } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import { writeFileDurably } from '../platform/durable-files.js';

export const VM_STATE_FILE = 'vm.json';
/** The state file a suspension writes into the runtime directory. */
export const SUSPENDED_STATE_FILE = 'suspended.state';

const Uuid = Type.String({ pattern: '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$' });

const VmStateSchema = Type.Object(
  {
    /** The uid QEMU runs as: the runtime's own for as long as its directory exists. */
    uid: Type.Integer({ minimum: 1, maximum: 2 ** 31 - 2 }),
    /** What the VM was launched with; a start may change them (pending limits). */
    memoryMib: Type.Integer({ minimum: 1 }),
    vcpus: Type.Integer({ minimum: 1 }),
    /** The host TAP of its NIC, or null for a NIC on an empty hub (templates). */
    tap: Type.Union([Type.String({ pattern: '^[a-z0-9]{1,15}$' }), Type.Null()]),
    /** The top overlay in the runtime directory, and its block node name (`disk-<n>`). */
    disk: Type.Integer({ minimum: 0 }),
    /** Layers below the overlay, nearest first. */
    chain: Type.Array(Uuid, { maxItems: 4096 }),
    /** The template whose root disk is the chain's bottom (template-disks.ts); absent: the guest image's rootfs. */
    base: Type.Optional(Uuid),
    /** Where guest RAM lives: the VM's own shared file, a checkpoint's file mapped privately, or anonymous. */
    ram: Type.Union([Type.Literal('shared'), Type.Object({ checkpoint: Uuid }, { additionalProperties: false }), Type.Null()]),
    diskSizeBytes: Type.Integer({ minimum: 1 }),
    /** The balloon target last set, in MiB; absent while the guest has all of its memory. */
    balloonMib: Type.Optional(Type.Integer({ minimum: 1 })),
    /** Set while the VM is suspended: where its RAM went (its device state is SUSPENDED_STATE_FILE). */
    suspended: Type.Optional(Type.Object({ ram: Type.Union([Type.Literal('shared'), Type.Null()]) }, { additionalProperties: false })),
  },
  { additionalProperties: false },
);

export type VmState = Static<typeof VmStateSchema>;

export const diskFileOf = (state: Pick<VmState, 'disk'>): string => `disk-${state.disk}.qcow2`;
export const diskNodeOf = (state: Pick<VmState, 'disk'>): string => `disk-${state.disk}`;

/** The state file is missing, torn, or not one this version wrote. */
export class VmStateError extends Error {}

export function readVmState(dir: string): VmState {
  let text: string;
  try {
    text = readFileSync(join(dir, VM_STATE_FILE), 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new VmStateError(code === 'ENOENT' ? 'the runtime has no state file' : `the runtime's state file cannot be read (${code ?? (err as Error).message})`);
  }
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (err) {
    throw new VmStateError(`the runtime's state file is damaged (${text.length === 0 ? 'empty' : (err as Error).message})`);
  }
  if (!Value.Check(VmStateSchema, raw)) {
    const first = Value.Errors(VmStateSchema, raw).First();
    throw new VmStateError(`the runtime's state file is damaged or from another version (${first === undefined ? 'invalid' : `${first.path || '/'}: ${first.message}`})`);
  }
  return raw;
}

export function writeVmState(dir: string, state: VmState): void {
  writeFileDurably(join(dir, VM_STATE_FILE), JSON.stringify(state, null, 2));
}
