/**
 * Prometheus metrics for the HTTP facade. prom-client supplies the process metrics; the
 * per-request counter and histogram are plain numbers kept here and written in the text format
 * when /metrics is scraped, because prom-client's labelled observe (label hashing and checks on
 * every call) cost about a tenth of the API's throughput on its hot path.
 */
import type { FastifyContextConfig, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { Registry, collectDefaultMetrics } from 'prom-client';
import { isLoopbackHost } from './loopback.js';

const BUCKETS = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30];

interface RouteStats {
  labels: string;
  /** Answers per status code. */
  statuses: Map<number, number>;
  count: number;
  sum: number;
  /** Observations per bucket, not cumulative; the last slot is +Inf. */
  buckets: number[];
}

const escapeLabel = (v: string): string => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n');

export class Metrics {
  readonly #registry = new Registry();
  readonly #routes = new Map<string, RouteStats>();

  constructor() {
    collectDefaultMetrics({ register: this.#registry, prefix: 'vessel_' });
  }

  get contentType(): string {
    return this.#registry.contentType;
  }

  /** `route` is the route's pattern, not the URL, which keeps label cardinality bounded. */
  observe(route: string, request: FastifyRequest, reply: FastifyReply): void {
    const key = `${request.method} ${route}`;
    let s = this.#routes.get(key);
    if (s === undefined) {
      s = { labels: `method="${escapeLabel(request.method)}",route="${escapeLabel(route)}"`, statuses: new Map(), count: 0, sum: 0, buckets: new Array<number>(BUCKETS.length + 1).fill(0) };
      this.#routes.set(key, s);
    }
    const seconds = reply.elapsedTime / 1000;
    let i = 0;
    while (i < BUCKETS.length && seconds > BUCKETS[i]!) i++;
    s.buckets[i]!++;
    s.count++;
    s.sum += seconds;
    s.statuses.set(reply.statusCode, (s.statuses.get(reply.statusCode) ?? 0) + 1);
  }

  async render(): Promise<string> {
    const lines = [
      '# HELP vessel_http_requests_total HTTP requests',
      '# TYPE vessel_http_requests_total counter',
    ];
    for (const s of this.#routes.values()) {
      for (const [status, n] of s.statuses) lines.push(`vessel_http_requests_total{${s.labels},status="${status}"} ${n}`);
    }
    lines.push('# HELP vessel_http_request_duration_seconds HTTP request duration', '# TYPE vessel_http_request_duration_seconds histogram');
    for (const s of this.#routes.values()) {
      let cumulative = 0;
      BUCKETS.forEach((le, i) => {
        cumulative += s.buckets[i]!;
        lines.push(`vessel_http_request_duration_seconds_bucket{le="${le}",${s.labels}} ${cumulative}`);
      });
      lines.push(`vessel_http_request_duration_seconds_bucket{le="+Inf",${s.labels}} ${s.count}`);
      lines.push(`vessel_http_request_duration_seconds_sum{${s.labels}} ${s.sum}`);
      lines.push(`vessel_http_request_duration_seconds_count{${s.labels}} ${s.count}`);
    }
    return `${await this.#registry.metrics()}\n${lines.join('\n')}\n`;
  }
}

/**
 * Counts every route's answers and their durations, and serves them at /metrics: open to a local
 * Prometheus; from elsewhere (`listenHost` beyond loopback), to admin tokens, since route names
 * and counts tell what tenants do.
 */
export function measureRoutes(app: FastifyInstance, listenHost: string): void {
  const metrics = new Metrics();
  // Each route's observer is made when the route is declared: nothing is looked up per request.
  app.addHook('onRoute', (route) => {
    const observe = (request: FastifyRequest, reply: FastifyReply, done: () => void): void => {
      metrics.observe(route.url, request, reply);
      done();
    };
    route.onResponse = [...[route.onResponse ?? []].flat(), observe];
  });
  app.addHook('onResponse', (request, reply, done) => {
    if (request.is404) metrics.observe('unmatched', request, reply);
    done();
  });
  const config: FastifyContextConfig = isLoopbackHost(listenHost) ? {} : { scope: 'admin', bearerOnVmHost: true };
  app.get('/metrics', { schema: { hide: true }, config }, async (_req, reply) => reply.type(metrics.contentType).send(await metrics.render()));
}
