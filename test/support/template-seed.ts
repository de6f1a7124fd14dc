/**
 * One system template for a whole test run. The first create on a fresh data directory boots
 * the guest image into a template VM and checkpoints it (tens of seconds under TCG), and every VM
 * test file used to pay that again. A seed is a data directory in which a service has made the
 * template of the default shape and stopped: its CA, its store (the template's row, the admin
 * token's, which the next start replaces, and nothing else) and the template's files.
 * `scripts/run-tests.ts` makes one per run and names it in VESSEL_TEST_TEMPLATE_SEED; each new
 * single-host `Service` then starts from a copy of it (test/support/service.ts).
 *
 * A copy, never a link: each test file owns its files, and checkpoint-integrity damages its
 * template on purpose. Every file shares the seed's CA, which is what ties a template to its
 * service (the image id covers it). The master key is not part of the seed: each service makes
 * its own. A seed is for one run: it is not checked against the code that made it, so one kept
 * past a change to how templates are made would test the old template.
 */
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { killProcessesUnder, removeNetworkOf, SEED_ENTRIES, Service } from './service.js';

/** Makes a seed in `dir` (empty or missing): a service that makes the default template, then stops. */
export async function makeTemplateSeed(dir: string): Promise<void> {
  mkdirSync(dir, { recursive: true });
  const svc = new Service({ VESSEL_WARM_POOL: '0' }, dir);
  try {
    await svc.start();
    // A create forks the template of its shape, making it first; the runtime itself is not kept.
    const created = await svc.call('POST', '/v1/runtimes', { display_name: 'template-seed' });
    if (created.status !== 201) throw new Error(`the seed's create failed (${created.status}): ${JSON.stringify(created.body)}\n${svc.log}`);
    const deleted = await svc.call('DELETE', '/v1/runtimes/template-seed');
    if (deleted.status !== 200) throw new Error(`the seed's runtime was not deleted (${deleted.status}): ${JSON.stringify(deleted.body)}`);
  } finally {
    await svc.stop();
    killProcessesUnder(dir);
    await removeNetworkOf(dir);
  }
  for (const entry of SEED_ENTRIES) if (!existsSync(join(dir, entry))) throw new Error(`the seed has no ${entry}`);
  // The store is copied as its one file: a WAL left beside it would hold rows the copy lacks.
  if (existsSync(join(dir, 'store', 'vessel.db-wal'))) throw new Error("the seed's service left its store's WAL: it did not close its store");
}
