/**
 * What a schema cannot see: whether the objects of one rendering fit together. Services and
 * budgets select pods that exist, ports and probes name ports the container has, every Secret,
 * ConfigMap and key a pod reads exists in its namespace (made here, or by the controller that
 * the manifests ask for: CloudNativePG's `<cluster>-app`, cert-manager's TLS secret), every
 * mount has its volume. Each check returns one line per problem.
 */
import { CNPG_APP_SECRET_KEYS } from './cnpg-cluster-schema.js';
import { objectName, podSpecOf, type K8sObject } from './kustomize.js';

type Labels = Record<string, string>;
interface Port { name?: string; containerPort: number; hostPort?: number }
interface Probe { httpGet?: { path?: string; port: number | string } }
interface KeyRef { name: string; key: string; optional?: boolean }
interface EnvVar { name: string; value?: string; valueFrom?: { secretKeyRef?: KeyRef; configMapKeyRef?: KeyRef; fieldRef?: { fieldPath: string } } }
interface Container {
  name: string;
  args?: string[];
  ports?: Port[];
  env?: EnvVar[];
  envFrom?: { secretRef?: { name: string }; configMapRef?: { name: string } }[];
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  startupProbe?: Probe;
  volumeMounts?: { name: string; mountPath?: string }[];
  securityContext?: Record<string, unknown>;
}
interface PodSpec {
  containers: Container[];
  volumes?: { name: string; secret?: { secretName: string }; configMap?: { name: string } }[];
  hostNetwork?: boolean;
  dnsPolicy?: string;
  priorityClassName?: string;
  securityContext?: Record<string, unknown>;
}
interface Workload { object: K8sObject; namespace: string; labels: Labels; pod: PodSpec; annotations: Labels }

const ns = (o: K8sObject): string => o.metadata.namespace ?? '';
const matches = (selector: Labels | undefined, labels: Labels): boolean => selector !== undefined && Object.keys(selector).length > 0 && Object.entries(selector).every(([k, v]) => labels[k] === v);

function workloads(objects: K8sObject[]): Workload[] {
  return objects.flatMap((o) => {
    const pod = podSpecOf(o) as PodSpec | undefined;
    if (!pod) return [];
    const template = (o.spec as { template: { metadata?: { labels?: Labels; annotations?: Labels } } }).template;
    return [{ object: o, namespace: ns(o), labels: template.metadata?.labels ?? {}, annotations: template.metadata?.annotations ?? {}, pod }];
  });
}

/** Secrets and ConfigMaps by namespace/name, with their keys; null keys: made by a controller whose keys we do not list. */
function configSources(objects: K8sObject[]): Map<string, Set<string>> {
  const found = new Map<string, Set<string>>();
  for (const o of objects) {
    if (o.kind === 'Secret' || o.kind === 'ConfigMap') {
      const data = { ...((o.data as object | undefined) ?? {}), ...((o.stringData as object | undefined) ?? {}) };
      found.set(`${o.kind}:${ns(o)}/${o.metadata.name}`, new Set(Object.keys(data)));
    }
    if (o.kind === 'Cluster' && o.apiVersion === 'postgresql.cnpg.io/v1' && (o.spec as { bootstrap?: { initdb?: unknown } }).bootstrap?.initdb) {
      found.set(`Secret:${ns(o)}/${o.metadata.name}-app`, new Set(CNPG_APP_SECRET_KEYS));
    }
    if (o.kind === 'Ingress' && o.metadata.annotations?.['cert-manager.io/cluster-issuer']) {
      for (const tls of (o.spec as { tls?: { secretName?: string }[] }).tls ?? []) {
        if (tls.secretName) found.set(`Secret:${ns(o)}/${tls.secretName}`, new Set(['tls.crt', 'tls.key']));
      }
    }
  }
  return found;
}

function portMatches(container: Container, port: number | string): boolean {
  return (container.ports ?? []).some((p) => (typeof port === 'string' ? p.name === port : p.containerPort === port));
}

export function referenceProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  const pods = workloads(objects);
  const sources = configSources(objects);
  const namespaces = new Set(objects.filter((o) => o.kind === 'Namespace').map((o) => o.metadata.name));

  // The classes every cluster has; any other a pod names must be rendered with it.
  const priorityClasses = new Set(['system-cluster-critical', 'system-node-critical', ...objects.filter((o) => o.kind === 'PriorityClass').map((o) => o.metadata.name)]);

  for (const o of objects) {
    if (o.kind !== 'Namespace' && o.kind !== 'PriorityClass' && !namespaces.has(ns(o))) problems.push(`${objectName(o)}: namespace '${ns(o)}' is not among the rendered Namespaces`);
  }

  for (const w of pods) {
    const where = objectName(w.object);
    const selector = (w.object.spec as { selector?: { matchLabels?: Labels } }).selector?.matchLabels;
    if (!matches(selector, w.labels)) problems.push(`${where}: selector ${JSON.stringify(selector)} does not match its own pod labels`);
    const volumes = new Set((w.pod.volumes ?? []).map((v) => v.name));
    const mounted = new Set<string>();
    for (const c of w.pod.containers) {
      for (const [kind, probe] of [['readiness', c.readinessProbe], ['liveness', c.livenessProbe], ['startup', c.startupProbe]] as const) {
        if (!probe?.httpGet) {
          if (kind !== 'startup') problems.push(`${where}/${c.name}: no ${kind} probe on /healthz`);
          continue;
        }
        if (probe.httpGet.path !== '/healthz') problems.push(`${where}/${c.name}: ${kind} probe on ${probe.httpGet.path}, not /healthz`);
        if (!portMatches(c, probe.httpGet.port)) problems.push(`${where}/${c.name}: ${kind} probe port '${probe.httpGet.port}' is not a port of the container`);
      }
      const refs: [string, string, KeyRef | undefined][] = [];
      for (const e of c.env ?? []) {
        refs.push(['Secret', e.name, e.valueFrom?.secretKeyRef], ['ConfigMap', e.name, e.valueFrom?.configMapKeyRef]);
      }
      for (const [kind, variable, ref] of refs) {
        if (!ref || ref.optional) continue;
        const keys = sources.get(`${kind}:${w.namespace}/${ref.name}`);
        if (!keys) problems.push(`${where}/${c.name}: ${variable} reads ${kind} '${ref.name}', which does not exist in namespace '${w.namespace}'`);
        else if (!keys.has(ref.key)) problems.push(`${where}/${c.name}: ${variable} reads key '${ref.key}' of ${kind} '${ref.name}', which has only ${[...keys].join(', ')}`);
      }
      for (const from of c.envFrom ?? []) {
        const [kind, name] = from.secretRef ? ['Secret', from.secretRef.name] : ['ConfigMap', from.configMapRef?.name ?? ''];
        if (!sources.has(`${kind}:${w.namespace}/${name}`)) problems.push(`${where}/${c.name}: envFrom ${kind} '${name}' does not exist in namespace '${w.namespace}'`);
      }
      for (const m of c.volumeMounts ?? []) {
        mounted.add(m.name);
        if (!volumes.has(m.name)) problems.push(`${where}/${c.name}: mounts '${m.name}', which is not a volume of the pod`);
      }
      if (w.pod.hostNetwork) {
        for (const p of c.ports ?? []) if (p.hostPort !== undefined && p.hostPort !== p.containerPort) problems.push(`${where}/${c.name}: with hostNetwork, hostPort ${p.hostPort} must equal containerPort ${p.containerPort}`);
      }
    }
    for (const v of w.pod.volumes ?? []) {
      if (!mounted.has(v.name)) problems.push(`${where}: volume '${v.name}' is mounted by no container`);
      const [kind, name] = v.secret ? ['Secret', v.secret.secretName] : v.configMap ? ['ConfigMap', v.configMap.name] : [undefined, undefined];
      if (kind && !sources.has(`${kind}:${w.namespace}/${name}`)) problems.push(`${where}: volume '${v.name}' reads ${kind} '${name}', which does not exist`);
    }
    if (w.pod.priorityClassName !== undefined && !priorityClasses.has(w.pod.priorityClassName)) problems.push(`${where}: priorityClassName '${w.pod.priorityClassName}' is not a rendered PriorityClass`);
    if (w.pod.hostNetwork && w.pod.dnsPolicy !== 'ClusterFirstWithHostNet') problems.push(`${where}: hostNetwork without dnsPolicy ClusterFirstWithHostNet cannot resolve cluster Services`);
    if (w.annotations['prometheus.io/scrape'] === 'true') {
      const port = Number(w.annotations['prometheus.io/port']);
      if (!w.pod.containers.some((c) => portMatches(c, port))) problems.push(`${where}: prometheus.io/port ${w.annotations['prometheus.io/port']} is not a container port`);
      if (w.annotations['prometheus.io/path'] !== '/metrics') problems.push(`${where}: prometheus.io/path is not /metrics`);
    }
  }

  const services = objects.filter((o) => o.kind === 'Service');
  for (const s of services) {
    const spec = s.spec as { selector?: Labels; ports: { name?: string; port: number; targetPort?: number | string }[] };
    const selected = pods.filter((w) => w.namespace === ns(s) && matches(spec.selector, w.labels));
    if (selected.length === 0) {
      problems.push(`${objectName(s)}: selector ${JSON.stringify(spec.selector)} matches no pod template`);
      continue;
    }
    for (const p of spec.ports) {
      const target = p.targetPort ?? p.port;
      for (const w of selected) if (!w.pod.containers.some((c) => portMatches(c, target))) problems.push(`${objectName(s)}: port ${p.name ?? p.port} targets '${target}', which ${objectName(w.object)} does not expose`);
    }
  }

  for (const b of objects.filter((o) => o.kind === 'PodDisruptionBudget')) {
    const selector = (b.spec as { selector?: { matchLabels?: Labels } }).selector?.matchLabels;
    if (!pods.some((w) => w.namespace === ns(b) && matches(selector, w.labels))) problems.push(`${objectName(b)}: selector ${JSON.stringify(selector)} matches no pod template`);
  }

  for (const i of objects.filter((o) => o.kind === 'Ingress')) {
    const rules = (i.spec as { rules?: { host?: string; http?: { paths: { backend: { service?: { name: string; port: { name?: string; number?: number } } } }[] } }[] }).rules ?? [];
    for (const r of rules) {
      for (const path of r.http?.paths ?? []) {
        const backend = path.backend.service;
        if (!backend) continue;
        const service = services.find((s) => ns(s) === ns(i) && s.metadata.name === backend.name);
        const ports = (service?.spec as { ports: { name?: string; port: number }[] } | undefined)?.ports ?? [];
        if (!service) problems.push(`${objectName(i)}: host ${r.host} routes to Service '${backend.name}', which does not exist`);
        else if (!ports.some((p) => (backend.port.name !== undefined ? p.name === backend.port.name : p.port === backend.port.number))) problems.push(`${objectName(i)}: host ${r.host} routes to port ${backend.port.name ?? backend.port.number}, which Service '${backend.name}' does not have`);
      }
    }
  }

  // Synchronous replicas must be replicas: fewer than the instances, the primary being one of
  // them. A schema cannot relate two fields.
  for (const c of objects.filter((o) => o.kind === 'Cluster' && o.apiVersion === 'postgresql.cnpg.io/v1')) {
    const spec = c.spec as { instances: number; postgresql?: { synchronous?: { number: number } } };
    const synchronous = spec.postgresql?.synchronous?.number;
    if (synchronous !== undefined && synchronous >= spec.instances) problems.push(`${objectName(c)}: ${synchronous} synchronous replicas need more than ${spec.instances} instances`);
  }
  return problems;
}

/** The pod's containers, for checks specific to one workload. */
export const containersOf = (o: K8sObject): Container[] => (podSpecOf(o) as PodSpec | undefined)?.containers ?? [];
