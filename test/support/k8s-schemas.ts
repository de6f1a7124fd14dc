/**
 * Schema validation of rendered Kubernetes objects, without a cluster:
 * - built-in kinds against kubernetes-models (npm), which bundles the Kubernetes OpenAPI schemas
 *   as compiled validators: types, formats, enums and required fields;
 * - unknown fields, which those schemas let through (as the API server's pruning would, where
 *   `kubectl apply` now refuses them), through the TypeScript interfaces of the same package:
 *   each object becomes an object literal typed as its kind, and TypeScript's excess-property
 *   check names every field the type does not have;
 * - CloudNativePG's Cluster against our schema of the fields we use (cnpg-cluster-schema.ts).
 * A kind with none of these is an error, never a pass.
 */
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Ajv } from 'ajv';
import ts from 'typescript';
import { CNPG_CLUSTER_SCHEMA } from './cnpg-cluster-schema.js';
import { objectName, type K8sObject } from './kustomize.js';

/** apiVersion/kind → the kubernetes-models module that holds its model and `I<Kind>` interface. */
const MODELS: Record<string, string> = {
  'v1/Namespace': 'kubernetes-models/v1/Namespace',
  'v1/ConfigMap': 'kubernetes-models/v1/ConfigMap',
  'v1/Secret': 'kubernetes-models/v1/Secret',
  'v1/Service': 'kubernetes-models/v1/Service',
  'apps/v1/Deployment': 'kubernetes-models/apps/v1/Deployment',
  'apps/v1/DaemonSet': 'kubernetes-models/apps/v1/DaemonSet',
  'policy/v1/PodDisruptionBudget': 'kubernetes-models/policy/v1/PodDisruptionBudget',
  'scheduling.k8s.io/v1/PriorityClass': 'kubernetes-models/scheduling.k8s.io/v1/PriorityClass',
  'networking.k8s.io/v1/Ingress': 'kubernetes-models/networking.k8s.io/v1/Ingress',
};

const ajv = new Ajv({ allErrors: true, strict: true });
const validateCnpgCluster = ajv.compile(CNPG_CLUSTER_SCHEMA);

const typeKey = (o: K8sObject): string => `${o.apiVersion}/${o.kind}`;

type ModelClass = new (data: unknown) => { validate(): void };

/** Problems found by the bundled schemas (and ours for CloudNativePG), one line each. */
export async function schemaProblems(objects: K8sObject[]): Promise<string[]> {
  const problems: string[] = [];
  for (const o of objects) {
    if (typeKey(o) === 'postgresql.cnpg.io/v1/Cluster') {
      if (!validateCnpgCluster(o)) for (const e of validateCnpgCluster.errors ?? []) problems.push(`${objectName(o)}: ${e.instancePath || '/'} ${e.message ?? ''}${e.keyword === 'additionalProperties' ? ` '${(e.params as { additionalProperty: string }).additionalProperty}'` : ''}`);
      continue;
    }
    const module = MODELS[typeKey(o)];
    if (module === undefined) {
      problems.push(`${objectName(o)}: no schema for ${typeKey(o)}`);
      continue;
    }
    const Model = (await import(module))[o.kind] as ModelClass;
    try {
      new Model(structuredClone(o)).validate();
    } catch (err) {
      problems.push(`${objectName(o)}: ${(err as Error).message}`);
    }
  }
  return problems;
}

const parsedDeclarations = new Map<string, ts.SourceFile>();
const repoRoot = join(dirname(fileURLToPath(import.meta.url)), '../../..');

/** Fields that the kind's TypeScript interface does not have, one line each. */
export function unknownFieldProblems(objects: K8sObject[]): string[] {
  const typed = objects.filter((o) => MODELS[typeKey(o)] !== undefined);
  // One virtual module: an import per kind, then each object as a typed constant. Line numbers
  // map a diagnostic back to its object.
  const lines: string[] = [];
  const kinds = [...new Set(typed.map(typeKey))];
  kinds.forEach((k, i) => lines.push(`import type { I${k.split('/').pop()} as T${i} } from '${MODELS[k]}';`));
  const starts: { line: number; object: K8sObject }[] = [];
  typed.forEach((o, i) => {
    starts.push({ line: lines.length, object: o });
    lines.push(...`export const o${i}: T${kinds.indexOf(typeKey(o))} = ${JSON.stringify(o, null, 1)};`.split('\n'));
  });
  const file = join(repoRoot, 'test', '__rendered_manifests__.ts');
  const source = lines.join('\n');
  const options: ts.CompilerOptions = { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, target: ts.ScriptTarget.ES2022, strict: true, noEmit: true, skipLibCheck: true, types: [] };
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  // The standard library and kubernetes-models' declarations are parsed once per process.
  host.getSourceFile = (name, version, ...rest) => {
    if (name === file) return ts.createSourceFile(name, source, version);
    let parsed = parsedDeclarations.get(name);
    if (parsed === undefined) {
      parsed = getSourceFile(name, version, ...rest);
      if (parsed !== undefined) parsedDeclarations.set(name, parsed);
    }
    return parsed;
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => name === file || fileExists(name);
  const program = ts.createProgram([file], options, host);
  const problems: string[] = [];
  for (const d of ts.getPreEmitDiagnostics(program)) {
    const message = ts.flattenDiagnosticMessageText(d.messageText, ' ');
    if (d.file?.fileName !== file || d.start === undefined) {
      problems.push(`typing the manifests: ${message}`);
      continue;
    }
    const line = d.file.getLineAndCharacterOfPosition(d.start).line;
    const owner = [...starts].reverse().find((s) => s.line <= line);
    problems.push(`${owner ? objectName(owner.object) : '?'}: ${message}`);
  }
  return problems;
}
