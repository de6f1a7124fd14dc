/**
 * Renders a kustomization the way `kubectl kustomize` does, for the subset of kustomize that
 * deploy/kubernetes uses: resources (files and directories), namespace, images, generators with
 * a fixed name, and inline JSON 6902 patches. No kustomize binary is packaged on npm or in Debian,
 * so CI renders with this; anything outside the subset throws rather than being ignored, and the
 * test compares this rendering with kubectl's wherever kubectl is installed.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';

export type K8sObject = Record<string, unknown> & {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
};

type JsonPatchOp = { op: 'add' | 'remove' | 'replace' | 'test'; path: string; value?: unknown };

interface Generator {
  name: string;
  envs?: string[];
  literals?: string[];
  options?: { disableNameSuffixHash?: boolean; labels?: Record<string, string>; annotations?: Record<string, string> };
}

interface Kustomization {
  apiVersion?: string;
  kind?: string;
  namespace?: string;
  resources?: string[];
  images?: { name: string; newName?: string; newTag?: string }[];
  secretGenerator?: Generator[];
  configMapGenerator?: Generator[];
  patches?: { target: { kind: string; name: string }; patch: string }[];
}

const KNOWN_FIELDS = new Set(['apiVersion', 'kind', 'namespace', 'resources', 'images', 'secretGenerator', 'configMapGenerator', 'patches']);
const GENERATOR_FIELDS = new Set(['name', 'envs', 'literals', 'options']);
const GENERATOR_OPTIONS = new Set(['disableNameSuffixHash', 'labels', 'annotations']);

/** Kinds that have no namespace: kustomize's namespace transformer leaves them alone. */
const CLUSTER_SCOPED = new Set(['Namespace', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition', 'PriorityClass', 'StorageClass', 'IngressClass', 'ClusterIssuer', 'PersistentVolume']);

export class KustomizeError extends Error {}

/** `Kind/name`, how problems name an object. */
export const objectName = (o: K8sObject): string => `${o.kind}/${o.metadata?.name ?? '?'}`;

/** Every object the kustomization in `dir` renders to. */
export function renderKustomization(dir: string): K8sObject[] {
  const k = readKustomization(dir);
  const objects: K8sObject[] = [];
  for (const entry of k.resources ?? []) objects.push(...loadResource(join(dir, entry)));
  for (const g of k.configMapGenerator ?? []) objects.push(generate(dir, 'ConfigMap', g));
  for (const g of k.secretGenerator ?? []) objects.push(generate(dir, 'Secret', g));
  for (const p of k.patches ?? []) applyPatch(objects, p.target, p.patch);
  if (k.namespace !== undefined) for (const o of objects) if (!CLUSTER_SCOPED.has(o.kind)) o.metadata.namespace = k.namespace;
  for (const image of k.images ?? []) for (const o of objects) retag(o, image);
  return objects;
}

function readKustomization(dir: string): Kustomization {
  const doc = parse(readFileSync(join(dir, 'kustomization.yaml'), 'utf8')) as Record<string, unknown>;
  for (const key of Object.keys(doc)) if (!KNOWN_FIELDS.has(key)) throw new KustomizeError(`${dir}: kustomization field '${key}' is not supported by this renderer`);
  const k = doc as Kustomization;
  for (const g of [...(k.secretGenerator ?? []), ...(k.configMapGenerator ?? [])]) {
    for (const key of Object.keys(g)) if (!GENERATOR_FIELDS.has(key)) throw new KustomizeError(`${dir}: generator field '${key}' is not supported`);
    for (const key of Object.keys(g.options ?? {})) if (!GENERATOR_OPTIONS.has(key)) throw new KustomizeError(`${dir}: generator option '${key}' is not supported`);
    // kustomize's name hash (and the rewriting of every reference to it) is not reproduced here.
    if (g.options?.disableNameSuffixHash !== true) throw new KustomizeError(`${dir}: generator '${g.name}' needs options.disableNameSuffixHash: true`);
  }
  return k;
}

function loadResource(path: string): K8sObject[] {
  if (statSync(path).isDirectory()) return renderKustomization(path);
  const objects: K8sObject[] = [];
  for (const doc of parseAllDocuments(readFileSync(path, 'utf8'))) {
    if (doc.errors.length > 0) throw new KustomizeError(`${path}: ${doc.errors[0]!.message}`);
    const value = doc.toJS() as K8sObject | null;
    if (value === null) continue;
    if (typeof value.apiVersion !== 'string' || typeof value.kind !== 'string' || typeof value.metadata?.name !== 'string') {
      throw new KustomizeError(`${path}: a resource needs apiVersion, kind and metadata.name`);
    }
    objects.push(value);
  }
  return objects;
}

/** KEY=VALUE lines of an env file; blank lines and # comments are skipped, as kustomize does. */
function envFile(path: string): [string, string][] {
  const pairs: [string, string][] = [];
  for (const line of readFileSync(path, 'utf8').split('\n')) {
    const trimmed = line.trim();
    if (trimmed === '' || trimmed.startsWith('#')) continue;
    const eq = trimmed.indexOf('=');
    if (eq <= 0) throw new KustomizeError(`${path}: '${trimmed.slice(0, 20)}…' is not KEY=VALUE`);
    pairs.push([trimmed.slice(0, eq), trimmed.slice(eq + 1)]);
  }
  return pairs;
}

function generate(dir: string, kind: 'Secret' | 'ConfigMap', g: Generator): K8sObject {
  const pairs = [...(g.envs ?? []).flatMap((f) => envFile(join(dir, f))), ...(g.literals ?? []).map((l) => l.split(/=(.*)/s, 2) as [string, string])];
  const metadata: K8sObject['metadata'] = { name: g.name };
  if (g.options?.labels) metadata.labels = { ...g.options.labels };
  if (g.options?.annotations) metadata.annotations = { ...g.options.annotations };
  const entries = Object.fromEntries(pairs.map(([key, value]) => [key, kind === 'Secret' ? Buffer.from(value).toString('base64') : value]));
  return kind === 'Secret' ? { apiVersion: 'v1', kind, metadata, type: 'Opaque', data: entries } : { apiVersion: 'v1', kind, metadata, data: entries };
}

function applyPatch(objects: K8sObject[], target: { kind: string; name: string }, patchText: string): void {
  const matches = objects.filter((o) => o.kind === target.kind && o.metadata.name === target.name);
  if (matches.length === 0) throw new KustomizeError(`patch target ${target.kind}/${target.name} matches no resource`);
  const ops = parse(patchText) as JsonPatchOp[];
  if (!Array.isArray(ops)) throw new KustomizeError(`patch for ${target.kind}/${target.name} is not a JSON 6902 list`);
  for (const o of matches) for (const op of ops) applyOp(o, op, `${target.kind}/${target.name}`);
}

/** RFC 6901 pointer segments: `~1` is `/`, `~0` is `~`. */
const segments = (path: string): string[] => path.split('/').slice(1).map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'));

function applyOp(doc: unknown, op: JsonPatchOp, where: string): void {
  const parts = segments(op.path);
  const last = parts.pop();
  if (last === undefined) throw new KustomizeError(`${where}: a patch of the whole document is not supported`);
  let parent: unknown = doc;
  for (const part of parts) {
    parent = child(parent, part);
    if (parent === undefined) throw new KustomizeError(`${where}: ${op.op} ${op.path}: no such path`);
  }
  const fail = (why: string) => new KustomizeError(`${where}: ${op.op} ${op.path}: ${why}`);
  if (Array.isArray(parent)) {
    const index = last === '-' ? parent.length : Number(last);
    if (!Number.isInteger(index) || index < 0 || index > parent.length) throw fail('index out of range');
    if (op.op !== 'add' && index >= parent.length) throw fail('index out of range');
    if (op.op === 'add') parent.splice(index, 0, op.value);
    else if (op.op === 'remove') parent.splice(index, 1);
    else if (op.op === 'replace') parent[index] = op.value;
    else if (JSON.stringify(parent[index]) !== JSON.stringify(op.value)) throw fail('test failed');
    return;
  }
  if (parent === null || typeof parent !== 'object') throw fail('parent is not an object');
  const obj = parent as Record<string, unknown>;
  if (op.op !== 'add' && !(last in obj)) throw fail('no such member');
  if (op.op === 'add' || op.op === 'replace') obj[last] = op.value;
  else if (op.op === 'remove') delete obj[last];
  else if (JSON.stringify(obj[last]) !== JSON.stringify(op.value)) throw fail('test failed');
}

function child(node: unknown, key: string): unknown {
  if (Array.isArray(node)) return node[Number(key)];
  if (node !== null && typeof node === 'object') return (node as Record<string, unknown>)[key];
  return undefined;
}

/** The pod spec of a workload (Deployment, DaemonSet, StatefulSet, Job) or of a Pod. */
export function podSpecOf(o: K8sObject): Record<string, unknown> | undefined {
  if (o.kind === 'Pod') return o.spec as Record<string, unknown>;
  const template = (o.spec as { template?: { spec?: Record<string, unknown> } } | undefined)?.template;
  return template?.spec;
}

function retag(o: K8sObject, image: { name: string; newName?: string; newTag?: string }): void {
  const spec = podSpecOf(o);
  if (!spec) return;
  for (const list of ['containers', 'initContainers'] as const) {
    for (const c of (spec[list] as { image?: string }[] | undefined) ?? []) {
      if (c.image === undefined) continue;
      const [name, tag] = splitImage(c.image);
      if (name !== image.name) continue;
      c.image = `${image.newName ?? name}${image.newTag !== undefined ? `:${image.newTag}` : tag !== undefined ? `:${tag}` : ''}`;
    }
  }
}

/** `registry:5000/name:tag` → [`registry:5000/name`, `tag`]: a colon after the last slash is the tag. */
function splitImage(ref: string): [string, string | undefined] {
  const slash = ref.lastIndexOf('/');
  const colon = ref.indexOf(':', slash + 1);
  return colon < 0 ? [ref, undefined] : [ref.slice(0, colon), ref.slice(colon + 1)];
}
