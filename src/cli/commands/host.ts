/** `vessel serve`, `tenant limits` and `image build`: the commands an operator runs on the service's host (`token`: commands/token.ts). */
import { Option, type Command } from 'commander';
import type { LimitFlags } from '../host.js';

const host = () => import('../host.js');

export function registerHostCommands(program: Command): void {
  program
    .command('serve')
    .description('install missing host packages, build the guest image if needed, and serve the API')
    .addOption(
      new Option('--role <role>', 'all: one host does everything; api: an API node of a fleet; node: a VM host of a fleet (docs/scaling.md)')
        .choices(['all', 'api', 'node'])
        .default('all'),
    )
    .action(async (o: { role: 'all' | 'api' | 'node' }) => (await host()).serveFromEnv(o.role));

  const node = program.command('node').description("a fleet's VM hosts, in the shared store (VESSEL_DATABASE_URL)");
  node
    .command('ls')
    .description('every VM host: its lease, capacity, load and whether it is draining, one JSON line each')
    .action(async () => (await host()).listNodes());
  node
    .command('drain <name>')
    .description('no new runtimes on this host; those it runs go on until they are moved or deleted')
    .action(async (name: string) => (await host()).drainNode(name, true));
  node
    .command('evacuate <name>')
    .description('drains the host, then moves its runtimes (ids, names and URLs kept; suspended ones stay) and its checkpoints to other hosts; needs VESSEL_INTERNAL_SECRET and VESSEL_MASTER_KEY')
    .action(async (name: string) => (await host()).evacuateNode(name));
  node
    .command('enroll <name>')
    .description("issues a VM host's certificate and prints its key (give it to that host alone as VESSEL_NODE_KEY); needs VESSEL_INTERNAL_SECRET and VESSEL_MASTER_KEY; again: renews the certificate")
    .action(async (name: string) => (await host()).enrollNode(name));
  node
    .command('db-role <role>')
    .description("gives the VM hosts' PostgreSQL role what a host needs and no more (no token, secret, limit or fleet setting written); run as the tables' owner; later migrations grant again")
    .option('--create', 'create the role (LOGIN; password from VESSEL_HOST_DB_PASSWORD) if it is missing', false)
    .action(async (role: string, o: { create: boolean }) => (await host()).setUpHostDbRole(role, o));
  node
    .command('undrain <name>')
    .description('puts a drained host back into placement')
    .action(async (name: string) => (await host()).drainNode(name, false));

  const tenant = program.command('tenant').description("tenants' quotas");
  const limits = tenant.command('limits').description("what a tenant may hold: its own limits where set, else the VESSEL_TENANT_MAX_* defaults");
  limits
    .command('show')
    .requiredOption('--tenant <tenant>', 'the tenant')
    .action(async (o: { tenant: string }) => (await host()).showTenantLimits(o.tenant));
  limits
    .command('set')
    .description("sets the given limits (applies at once, also while the service runs); 'default' drops the tenant's own value")
    .requiredOption('--tenant <tenant>', 'the tenant')
    .option('--runtimes <n>', 'runtimes, in any state')
    .option('--vcpus <n>', 'vCPUs of the runtimes that hold a VM')
    .option('--memory-mib <n>', 'memory limits (MiB) of the runtimes that hold a VM')
    .option('--checkpoints <n>', 'checkpoints')
    .option('--checkpoint-gib <n>', 'disk space (GiB) of the ready checkpoints')
    .option('--templates <n>', 'templates, in any state')
    .option('--template-gib <n>', 'root disk space (GiB) of the ready templates')
    .action(async (o: LimitFlags) => (await host()).setTenantLimits(o));

  const image = program.command('image').description('the guest image');
  image
    .command('build')
    .description('rebuild the guest image from the recipe in guest/')
    .option('--if-missing', 'build only when no image matches the recipe', false)
    .action(async (o: { ifMissing: boolean }) => (await host()).buildGuestImage(o));
}
