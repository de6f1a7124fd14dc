/** The baseline for bench/api: a bare Fastify route answering the same JSON as GET /v1/secrets/{id}. */
import Fastify from 'fastify';

const body = JSON.parse(process.argv[3] ?? '{}') as object;
const app = Fastify({ logger: false });
app.get('/v1/secrets/:id', async () => body);
await app.listen({ host: '127.0.0.1', port: Number(process.argv[2]) });
process.stdout.write('ready\n');
