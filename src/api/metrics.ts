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

  observe(request: FastifyRequest, reply: FastifyReply): void {
    // The route pattern, not the URL, keeps label cardinality bounded.
    const route = request.routeOptions.url ?? 'unmatched';
    this.#requests.inc({ method: request.method, route, status: String(reply.statusCode) });
    this.#duration.observe({ method: request.method, route }, reply.elapsedTime / 1000);
  }

  render = (): Promise<string> => this.#registry.metrics();
}
