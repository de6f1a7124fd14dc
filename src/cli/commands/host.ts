/** `vessel serve`, `tenant limits` and `image build`: the commands an operator runs on the service's host (`token`: commands/token.ts). */
import type { Command } from 'commander';
import type { LimitFlags } from '../host.js';

const host = () => import('../host.js');

export function registerHostCommands(program: Command): void {
  program
    .command('serve')
    .description('install missing host packages, build the guest image if needed, and serve the API')
    .action(async () => (await host()).serveFromEnv());

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
    .action(async (o: LimitFlags) => (await host()).setTenantLimits(o));

  const image = program.command('image').description('the guest image');
  image
    .command('build')
    .description('rebuild the guest image from the recipe in guest/')
    .option('--if-missing', 'build only when no image matches the recipe', false)
    .action(async (o: { ifMissing: boolean }) => (await host()).buildGuestImage(o));
}
