/**
 * How vessel-agent is built: one gcc command line, for the image builder and the tests alike.
 * Static, so it is the guest's own program whatever libc the host builds with; -Os -s, as the
 * other guest programs. Test builds add -DVESSEL_AGENT_TEST_STUBS, which turns the identity and
 * power system calls into log lines (guest/agent/identity.c); the image never has it.
 */
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export const AGENT_SOURCE_DIR = resolve(dirname(fileURLToPath(import.meta.url)), '../../../../guest/agent');
export const AGENT_SOURCES = ['main.c', 'channel.c', 'ring.c', 'proc.c', 'files.c', 'identity.c'] as const;
/** Every file of the agent's source, for a recipe hash. */
export const AGENT_SOURCE_FILES = [...AGENT_SOURCES, 'agent.h', 'protocol.h', 'ring.h'] as const;

export function agentGccArgs(output: string, opts: { sourceDir?: string; testStubs?: boolean } = {}): string[] {
  const dir = opts.sourceDir ?? AGENT_SOURCE_DIR;
  return ['-std=c11', '-static', '-Os', '-s', '-Wall', '-Wextra', ...(opts.testStubs ? ['-DVESSEL_AGENT_TEST_STUBS'] : []), '-o', output, ...AGENT_SOURCES.map((f) => join(dir, f))];
}
