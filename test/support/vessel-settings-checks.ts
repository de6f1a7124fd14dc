/**
 * Vessel's own settings against the objects around them: the ports Vessel listens on are the
 * ports the pod declares (and so what Services, probes and the scrape target), the Ingress's
 * wildcard host is the runtime ingress domain, and the data directory is mounted. A mismatch
 * here renders and validates cleanly and still routes nothing.
 */
import { containersOf } from './k8s-references.js';
import { objectName, type K8sObject } from './kustomize.js';

/**
 * Per role, the settings it listens on → the name of the container port each must equal. A VM
 * host serves the API (the hop, /healthz, /metrics) on its internal port and never VESSEL_PORT.
 */
const PORT_SETTINGS: Record<string, Record<string, string>> = {
  all: { VESSEL_PORT: 'http', VESSEL_INGRESS_PORT: 'ingress' },
  api: { VESSEL_PORT: 'http', VESSEL_INGRESS_PORT: 'ingress' },
  node: { VESSEL_INGRESS_PORT: 'ingress', VESSEL_INTERNAL_PORT: 'internal' },
};

/** What a container's process sees: its ConfigMaps through envFrom, then its own env on top. */
function settingsOf(objects: K8sObject[], o: K8sObject, container: ReturnType<typeof containersOf>[number]): Map<string, string> {
  const settings = new Map<string, string>();
  for (const from of container.envFrom ?? []) {
    const map = objects.find((x) => x.kind === 'ConfigMap' && x.metadata.name === from.configMapRef?.name && x.metadata.namespace === o.metadata.namespace);
    for (const [k, v] of Object.entries((map?.data as Record<string, string> | undefined) ?? {})) settings.set(k, v);
  }
  for (const e of container.env ?? []) if (e.value !== undefined) settings.set(e.name, e.value);
  return settings;
}

export function vesselSettingProblems(objects: K8sObject[]): string[] {
  const problems: string[] = [];
  const domains = new Set<string>();
  for (const o of objects) {
    for (const c of containersOf(o)) {
      if (!c.args?.includes('serve')) continue;
      const where = `${objectName(o)}/${c.name}`;
      const settings = settingsOf(objects, o, c);
      const role = c.args.includes('--role') ? c.args[c.args.indexOf('--role') + 1]! : 'all';
      for (const [setting, portName] of Object.entries(PORT_SETTINGS[role] ?? {})) {
        const value = settings.get(setting);
        if (value === undefined) continue;
        const port = (c.ports ?? []).find((p) => p.name === portName);
        if (port?.containerPort !== Number(value)) problems.push(`${where}: ${setting}=${value} but its '${portName}' port is ${port?.containerPort ?? 'missing'}`);
      }
      const dataDir = settings.get('VESSEL_DATA_DIR');
      if (dataDir === undefined || !c.volumeMounts?.some((m) => m.mountPath === dataDir)) problems.push(`${where}: VESSEL_DATA_DIR ${dataDir ?? '(unset)'} is not a mounted volume`);
      const shares = settings.get('VESSEL_RATE_LIMIT_SHARES');
      const replicas = o.kind === 'Deployment' ? ((o.spec as { replicas?: number }).replicas ?? 1) : undefined;
      if (role === 'api' && replicas !== undefined && Number(shares ?? 1) !== replicas) {
        problems.push(`${where}: VESSEL_RATE_LIMIT_SHARES=${shares ?? '(unset)'} but the Deployment runs ${replicas} replicas: the per-token rate would be ${replicas}/${shares ?? 1} of what is configured`);
      }
      const domain = settings.get('VESSEL_INGRESS_DOMAIN');
      if (domain !== undefined) domains.add(domain);
    }
  }
  for (const i of objects.filter((o) => o.kind === 'Ingress')) {
    const rules = (i.spec as { rules?: { host?: string; http?: { paths: { backend: { service?: { port: { name?: string } } } }[] } }[] }).rules ?? [];
    for (const r of rules) {
      if (!r.http?.paths.some((p) => p.backend.service?.port.name === 'ingress')) continue;
      const domain = r.host?.startsWith('*.') ? r.host.slice(2) : undefined;
      if (domain === undefined || !domains.has(domain)) problems.push(`${objectName(i)}: runtime ingress host ${r.host} is not *.<VESSEL_INGRESS_DOMAIN> (${[...domains].join(', ') || 'unset'})`);
    }
  }
  return problems;
}
