/**
 * A JSON schema for the part of CloudNativePG's `Cluster` (postgresql.cnpg.io/v1) that
 * deploy/kubernetes uses, written by us from CloudNativePG's API reference. The operator's own
 * CRD schema is packaged neither on npm nor in Debian, so this is the stand-in: it knows only the
 * fields we set, and rejects every other one, so a misspelt or misplaced field fails here instead
 * of being pruned silently by the API server. What it cannot know (a field CloudNativePG renamed,
 * a limit of a newer release) is said in docs/scaling.md, "What was validated".
 */
const quantity = { type: 'string', pattern: '^[0-9]+(\\.[0-9]+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$' } as const;
const resourceList = { type: 'object', additionalProperties: false, properties: { cpu: quantity, memory: quantity } } as const;
const dnsLabel = { type: 'string', pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', maxLength: 63 } as const;
const stringMap = { type: 'object', additionalProperties: { type: 'string' } } as const;

export const CNPG_CLUSTER_SCHEMA = {
  type: 'object',
  additionalProperties: false,
  required: ['apiVersion', 'kind', 'metadata', 'spec'],
  properties: {
    apiVersion: { const: 'postgresql.cnpg.io/v1' },
    kind: { const: 'Cluster' },
    metadata: {
      type: 'object',
      additionalProperties: false,
      required: ['name'],
      // CloudNativePG derives Service and Secret names from the cluster's (`<name>-rw`, `-app`).
      properties: { name: { ...dnsLabel, maxLength: 50 }, namespace: dnsLabel, labels: stringMap, annotations: stringMap },
    },
    spec: {
      type: 'object',
      additionalProperties: false,
      required: ['instances', 'storage'],
      properties: {
        instances: { type: 'integer', minimum: 1 },
        imageName: { type: 'string', minLength: 1 },
        primaryUpdateStrategy: { enum: ['unsupervised', 'supervised'] },
        postgresql: {
          type: 'object',
          additionalProperties: false,
          properties: {
            parameters: stringMap,
            synchronous: {
              type: 'object',
              additionalProperties: false,
              required: ['method', 'number'],
              properties: {
                method: { enum: ['any', 'first'] },
                number: { type: 'integer', minimum: 1 },
                dataDurability: { enum: ['required', 'preferred'] },
              },
            },
          },
        },
        bootstrap: {
          type: 'object',
          additionalProperties: false,
          properties: {
            initdb: {
              type: 'object',
              additionalProperties: false,
              required: ['database', 'owner'],
              properties: {
                database: { type: 'string', minLength: 1 },
                owner: { type: 'string', minLength: 1 },
                secret: { type: 'object', additionalProperties: false, required: ['name'], properties: { name: dnsLabel } },
              },
            },
          },
        },
        storage: {
          type: 'object',
          additionalProperties: false,
          required: ['size'],
          properties: { size: quantity, storageClass: { type: 'string', minLength: 1 } },
        },
        affinity: {
          type: 'object',
          additionalProperties: false,
          properties: {
            enablePodAntiAffinity: { type: 'boolean' },
            topologyKey: { type: 'string', minLength: 1 },
            podAntiAffinityType: { enum: ['preferred', 'required'] },
          },
        },
        resources: { type: 'object', additionalProperties: false, properties: { requests: resourceList, limits: resourceList } },
        monitoring: { type: 'object', additionalProperties: false, properties: { enablePodMonitor: { type: 'boolean' } } },
      },
    },
  },
} as const;

/** The keys of the `<cluster>-app` Secret CloudNativePG makes for an initdb owner. */
export const CNPG_APP_SECRET_KEYS = ['username', 'password', 'host', 'port', 'dbname', 'uri', 'jdbc-uri', 'pgpass'];
