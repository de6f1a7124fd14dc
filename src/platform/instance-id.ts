/**
 * A service instance's name on its host: its VMs' cgroups, its gateway's TAPs (their alias) and
 * its nftables table carry it, so that instances on one host, each with its data directory, tell
 * theirs apart, and whatever cleans up after one finds what is its own.
 */
import { createHash } from 'node:crypto';

export const instanceIdOf = (dataDir: string): string => createHash('sha256').update(dataDir).digest('hex').slice(0, 8);
