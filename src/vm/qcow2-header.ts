/**
 * A qcow2 header, read before QEMU gets the file. A runtime's top overlay is writable by its
 * QEMU, so after a QEMU escape its header is the guest's to write. QEMU opens what a header names
 * as root, before it drops privileges: the backing file (we name every backing node on the command
 * line instead, so that name is never used) and, with the "external data file" feature, a data
 * file opened read-write. So an overlay or layer is handed over only if its header asks for no
 * feature but the ones we use.
 */
import { fstatSync, readSync } from 'node:fs';

const QCOW2_MAGIC = 0x514649fb;
/** Version 3's header up to and including `header_length` (the fields we read). */
const HEADER_BYTES = 104;
/** Incompatible features we accept: only "dirty" (bit 0), which a QEMU killed mid-write leaves set. */
const ACCEPTED_INCOMPATIBLE = 0b1n;

/** Why the qcow2 image open at `fd` must not be given to QEMU, or null if it may. */
export function qcow2HeaderProblem(fd: number): string | null {
  if (!fstatSync(fd).isFile()) return 'is not a regular file';
  const header = Buffer.alloc(HEADER_BYTES);
  const n = readSync(fd, header, 0, HEADER_BYTES, 0);
  if (n < 72 || header.readUInt32BE(0) !== QCOW2_MAGIC) return 'is not a qcow2 image';
  const version = header.readUInt32BE(4);
  if (version === 2) return null; // version 2 has no feature bits and no external data file
  if (version !== 3 || n < HEADER_BYTES) return `has an unknown qcow2 version (${version})`;
  const incompatible = header.readBigUInt64BE(72);
  if ((incompatible & ~ACCEPTED_INCOMPATIBLE) !== 0n) {
    return `asks for qcow2 features we never use (incompatible feature bits 0x${incompatible.toString(16)}; bit 2 is an external data file)`;
  }
  return null;
}
