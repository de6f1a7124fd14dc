/**
 * The import boundaries of docs/architecture.md ("Dependencies point inward"), checked by
 * dependency-cruiser over the TypeScript sources (not dist/, so a type-only import counts too):
 *
 *   npm run lint:boundaries
 *
 * test/unit/import-boundaries.test.ts runs the same check with the tests, and proves on a fixture
 * that every rule below catches what it forbids. Paths are relative to the repository root.
 *
 * What the rules do not forbid, on purpose (docs/architecture.md says why each layer needs it):
 * - api may import platform (clientKey reads the client key file);
 * - cluster, the fleet layer above a node, may import api (it supplies the API's fleet roles,
 *   src/api/fleet.ts, and uses the API's error mapping and WebSocket bearer prefix) and net (the
 *   ingress entry relays sockets with net's helpers);
 * - cli wires everything: it is the composition root.
 */
/** @type {import('dependency-cruiser').IConfiguration} */
module.exports = {
  forbidden: [
    {
      name: 'core-imports-no-adapter',
      comment: 'core is the domain: it declares ports (core/ports.ts) and imports no adapter, nor the API, the fleet or the CLI.',
      severity: 'error',
      from: { path: '^src/core/' },
      to: { path: '^src/(store|vm|net|objects|api|cluster|cli|host)/' },
    },
    {
      name: 'core-does-not-import-cluster',
      comment: 'the fleet (cluster) builds on core, never the other way round; named on its own so a violation says so.',
      severity: 'error',
      from: { path: '^src/core/' },
      to: { path: '^src/cluster/' },
    },
    {
      name: 'api-reaches-adapters-through-core',
      comment: 'api (and e2b, the E2B facade on it) knows the VM driver, the network gateway and the store only through the ports in core; cli/serve.ts wires the adapters.',
      severity: 'error',
      from: { path: '^src/(api|e2b)/' },
      to: { path: '^src/(vm|net|store|objects|host)/' },
    },
    {
      name: 'api-does-not-import-cluster',
      comment: 'the fleet builds on the API (it supplies a FleetRole, src/api/fleet.ts); the API importing it back would make the two one tangle again.',
      severity: 'error',
      from: { path: '^src/(api|e2b)/' },
      to: { path: '^src/cluster/' },
    },
    {
      name: 'no-import-cycle',
      comment: 'a cycle of modules can only be understood, tested and changed as one; make one side a port or an interface the other implements.',
      severity: 'error',
      from: { path: '^(src|client|console)/' },
      to: { circular: true },
    },
    {
      name: 'adapters-import-only-core-and-platform',
      comment: 'store, vm, net and objects are adapters of core ports: besides their own folder they import only core and platform.',
      severity: 'error',
      from: { path: '^src/(store|vm|net|objects)/' },
      to: { path: '^src/', pathNot: ['^src/(core|platform)/', '^src/$1/'] },
    },
    {
      name: 'host-link-imports-only-ports-and-adapters',
      comment: 'src/host is the typed link between the API process and the privileged host process: it serves and calls the core\'s ports over it, and knows nothing of the API, the store, the fleet or the CLI.',
      severity: 'error',
      from: { path: '^src/host/' },
      to: { path: '^src/', pathNot: ['^src/(core|platform|vm|net|host)/'] },
    },
    {
      name: 'sdk-and-console-import-nothing-from-src',
      comment: 'client/ is the published SDK and console/ runs in browsers: neither may pull in service code.',
      severity: 'error',
      from: { path: '^(client|console)/' },
      to: { path: '^src/' },
    },
  ],
  options: {
    // The compiled output, dependencies and generated files are not ours to check.
    doNotFollow: { path: '(^|/)node_modules/' },
    exclude: { path: '(^|/)(node_modules|dist)/' },
    // Type-only imports are dependencies too: an api file importing a vm type is still coupled.
    tsPreCompilationDeps: true,
    tsConfig: { fileName: 'tsconfig.json' },
    enhancedResolveOptions: {
      exportsFields: ['exports'],
      conditionNames: ['import', 'require', 'node', 'default', 'types'],
    },
  },
};
