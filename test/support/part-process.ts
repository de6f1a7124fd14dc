/**
 * What every part of the service (its gateway, its agent connections) must be once it runs,
 * read from /proc of the running process: its own user for good, no supplementary groups, no
 * capabilities, and not dumpable.
 */
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { runCommand } from '../../src/platform/run-command.js';

export async function assertUnprivilegedPart(pid: number, user: string): Promise<void> {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const uid = (await runCommand('id', ['-u', user])).trim();
  assert.match(status, new RegExp(`^Uid:\\s+${uid}\\s+${uid}\\s+${uid}\\s+${uid}$`, 'm'), `real, effective, saved and file uid are all ${user}`);
  assert.match(status, /^Groups:\s*$/m, 'no supplementary groups');
  // /proc/PID itself is always its owner's; the files in it are root's when the process is not dumpable.
  assert.equal(statSync(`/proc/${pid}/environ`).uid, 0, 'not dumpable: no process of its own uid may ptrace it or read its memory');
  for (const set of ['CapInh', 'CapPrm', 'CapEff']) assert.match(status, new RegExp(`^${set}:\\s+0+$`, 'm'), `${set} is empty`);
}
