/**
 * Cache keys of a build's steps. Each step's result is a disk layer; its key is a digest that
 * changes whenever the layer could, and only then:
 *
 *   base key  = H(v, "base", what the first layer is: an image's manifest digest and the guest
 *               kit's digest, or the default image's content digest)
 *   step key  = H(v, "step", parent's key, the step's instruction as planned, its inputs)
 *
 * The instruction "as planned" (dockerfile.ts) is after variable substitution, so a build arg
 * that a RUN sees, an ENV, the WORKDIR and the USER are all in it; the line number is not
 * (moving a step down a line keeps its layer). The inputs are what the instruction reads from
 * outside the disk: a COPY's matched files, by a digest of their names, modes, owners and
 * contents (file-tree.ts `treeDigest`, no times), and for COPY --from, the key of the stage it
 * copies from. H is SHA-256 over canonical JSON (sorted keys), so a key is the same on every host.
 *
 * Keys chain: changing a step changes its key and so every key after it, and nothing before it.
 * So a rebuild with only its last step changed finds every earlier layer in the cache.
 *
 * What the key does not cover, as in Docker: the network. A RUN that downloads "latest" is
 * cached as it first ran; a build asks for no cache to run it again.
 */
import { createHash } from 'node:crypto';
import { DockerfileError, type Step } from './dockerfile.js';
import { globMatches } from './dockerignore.js';
import { treeDigest, type FileTree, type TreeNode } from './file-tree.js';

/** Bumped when what a step's layer holds changes for the same key (a new executor). */
export const STEP_KEY_VERSION = 1;

export type BaseLayer =
  | { kind: 'image'; manifestDigest: string; kitDigest: string; diskBytes: number }
  | { kind: 'default'; imageDigest: string }
  /** A ready template of the tenant's: immutable, so its id names its content. */
  | { kind: 'template'; templateId: string }
  | { kind: 'scratch'; kitDigest: string; diskBytes: number };

/** JSON with object keys in order: one value, one text. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (value !== null && typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(([, v]) => v !== undefined).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonical(v)}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

const digestOf = (value: unknown): string => `sha256:${createHash('sha256').update(canonical(value)).digest('hex')}`;

export const baseKey = (base: BaseLayer): string => digestOf({ v: STEP_KEY_VERSION, what: 'base', base });

/** A COPY source matched in the context: its path there and the digest of what it holds. */
export interface MatchedSource {
  path: string;
  node: TreeNode;
  digest: string;
}

/**
 * The context paths a COPY or ADD source names: the path itself, or every path its wildcards
 * match (Go filepath.Match, as Docker). A source that matches nothing is an error, as in Docker.
 */
export function matchSources(tree: FileTree, step: Step & { kind: 'copy' }): MatchedSource[][] {
  return step.sources.map((source) => {
    const matched: MatchedSource[] = [];
    if (!/[*?[\\]/.test(source)) {
      const node = source === '.' ? tree.root : tree.get(source.split('/'));
      if (node !== undefined) matched.push({ path: source, node, digest: treeDigest(node) });
    } else {
      for (const [abs, node] of tree.walk()) {
        const path = abs.slice(1);
        if (path !== '' && globMatches(source, path)) matched.push({ path, node, digest: treeDigest(node) });
      }
    }
    if (matched.length === 0) throw new DockerfileError(step.line, `COPY ${source}: no such file or directory in the build context`);
    return matched;
  });
}

export interface StepInputs {
  /** COPY and ADD: what `matchSources` found, from the context or from the stage copied from. */
  sources?: MatchedSource[][];
  /** COPY --from: the final key of that stage. */
  fromStageKey?: string;
}

export function stepKey(parent: string, step: Step, inputs: StepInputs = {}): string {
  const { line: _line, ...instruction } = step;
  const normalized = step.kind === 'run' ? { ...instruction, env: [...step.env].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)) } : instruction;
  return digestOf({
    v: STEP_KEY_VERSION,
    what: 'step',
    parent,
    step: normalized,
    sources: inputs.sources?.map((list) => list.map((m) => [m.path, m.digest])),
    fromStageKey: inputs.fromStageKey,
  });
}

/** What the start command runs as and where: the final config's ENV, WORKDIR and USER. */
export interface StartSpec {
  argv: string[];
  env: [string, string][];
  workdir: string;
  user: string;
}

/**
 * The key of the layer sealed with the start command running: its parent (the last step's key),
 * the command as it runs, and what was waited for. The deadline is not in it: it changes when a
 * build fails, never what a sealed layer holds.
 */
export function startKey(parent: string, start: StartSpec, ready: { command: string | null; port: number | null }): string {
  const env = [...start.env].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return digestOf({ v: STEP_KEY_VERSION, what: 'start', parent, start: { ...start, env }, ready: { command: ready.command, port: ready.port } });
}
