/**
 * One API process of several on one PostgreSQL, for tests: the real API and core over
 * VESSEL_DATABASE_URL with the fake VM driver, on a loopback port of its own. Prints
 * `listening <port>` once it serves; SIGTERM closes it.
 */
import { PostgresStore } from '../../src/store/postgres-store.js';
import { apiHarness } from './api-harness.js';

const url = process.env.VESSEL_DATABASE_URL;
const adminToken = process.env.VESSEL_ADMIN_TOKEN;
if (url === undefined || adminToken === undefined) throw new Error('VESSEL_DATABASE_URL and VESSEL_ADMIN_TOKEN are required');

const h = await apiHarness({ store: await PostgresStore.open(url, { poolSize: 4 }), adminToken });
const address = await h.app.listen({ host: '127.0.0.1', port: 0 });
process.stdout.write(`listening ${new URL(address).port}\n`);
process.once('SIGTERM', () => {
  void h.close().then(() => process.exit(0));
});
