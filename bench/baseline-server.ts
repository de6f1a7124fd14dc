/**
 * The baseline for bench/api, in its own process: bare Fastify routes doing what the measured
 * API routes do at their core. GET answers the same JSON as GET /v1/secrets/{id}; POST inserts a
 * secret-sized row into SQLite in WAL mode with synchronous=FULL, so that its cost is durability
 * alone, with none of the service's work around it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Database } from '../src/store/sqlite-driver.js';
import Fastify from 'fastify';

const body = JSON.parse(process.argv[3] ?? '{}') as object;
const dir = mkdtempSync(join(tmpdir(), 'vessel-bench-db-'));
const db = new Database(join(dir, 'baseline.db'));
db.pragma('journal_mode = WAL');
db.pragma('synchronous = FULL');
db.exec('CREATE TABLE secrets (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, name TEXT NOT NULL UNIQUE, sealed TEXT NOT NULL)');
const insert = db.prepare('INSERT INTO secrets (id, name, sealed) VALUES (?, ?, ?)');
process.on('exit', () => rmSync(dir, { recursive: true, force: true }));
process.on('SIGTERM', () => process.exit(0));

const app = Fastify({ logger: false });
app.get('/v1/secrets/:id', async () => body);
app.post('/v1/secrets', async (req, reply) => {
  const { name } = req.body as { name: string };
  const id = crypto.randomUUID();
  insert.run(id, name, 'x'.repeat(64));
  return reply.code(201).send({ data: { id, display_name: name, cache_ttl_secs: 0 } });
});
await app.listen({ host: '127.0.0.1', port: Number(process.argv[2]) });
process.stdout.write('ready\n');
