/** Prometheus metrics for the HTTP facade. */
import type { FastifyReply, FastifyRequest } from 'fastify';
import { Counter, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export class Metrics {
  readonly #registry = new Registry();
  readonly #requests = new Counter({ name: 'vessel_http_requests_total', help: 'HTTP requests', labelNames: ['method', 'route', 'status'], registers: [this.#registry] });
  readonly #duration = new Histogram({
    name: 'vessel_http_request_duration_seconds',
    help: 'HTTP request duration',
    labelNames: ['method', 'route'],
    buckets: [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30],
    registers: [this.#registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.#registry, prefix: 'vessel_' });
  }

  get contentType(): string {
    return this.#registry.contentType;
  }

  /** Label children cached per (method, route, status): prom-client's label lookup costs more than the count. */
  readonly #children = new Map<string, { count: { inc(): void }; time: { observe(v: number): void } }>();

  observe(request: FastifyRequest, reply: FastifyReply): void {
    // The route pattern, not the URL, keeps label cardinality bounded.
    const route = request.routeOptions.url ?? 'unmatched';
    const key = `${request.method} ${route} ${reply.statusCode}`;
    let child = this.#children.get(key);
    if (child === undefined) {
      child = { count: this.#requests.labels(request.method, route, String(reply.statusCode)), time: this.#duration.labels(request.method, route) };
      this.#children.set(key, child);
    }
    child.count.inc();
    child.time.observe(reply.elapsedTime / 1000);
  }

  render = (): Promise<string> => this.#registry.metrics();
}
