/**
 * The web console at /console/: the static files that scripts/build-console.ts writes into
 * dist/console/. The files need no token (they are the same for everyone); every API call the page makes carries the user's.
 *
 * Served by @fastify/static, Fastify's own plugin: ETags, ranges, HEAD, pre-compressed variants
 * and safe path handling, none of which is worth writing again. `wildcard: false` gives each file
 * present at start a route of its own, so nothing else under the folder is reachable and a
 * request for anything else gets the API's 404 envelope.
 */
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import fastifyStatic from '@fastify/static';
import type { FastifyInstance, FastifyReply } from 'fastify';
import { VesselError } from '../core/errors.js';
import { sendError } from './errors.js';

/** Compiled to dist/src/api/: the console is built into dist/console/. */
export const CONSOLE_ROOT = fileURLToPath(new URL('../../console/', import.meta.url));

/**
 * Only the page's own files may run or style it, it may talk only to this origin (the API and
 * its terminal WebSockets, which 'self' covers), and no other site may frame it. No inline script
 * or style is allowed: a markup injection cannot run code, and with images, fonts and connections
 * kept to this origin, injected CSS has nowhere to send what it reads. xterm.js writes its
 * computed styles into <style> elements, which this forbids; console/xterm-styles.ts hands the
 * same rules to the page as constructed stylesheets instead, which scripts may make.
 */
export const CONSOLE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self'",
  "font-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  // The sign-in form is handled by script; without it, nothing is sent anywhere.
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

export interface ConsoleOptions {
  /** Where the built files are (tests); default dist/console/. */
  root?: string | undefined;
}

function secureHeaders(reply: FastifyReply): void {
  void reply.header('content-security-policy', CONSOLE_CSP);
  void reply.header('x-content-type-options', 'nosniff');
  void reply.header('referrer-policy', 'no-referrer');
  void reply.header('cross-origin-opener-policy', 'same-origin');
  // Revalidated every time (ETag): an upgraded service serves its own console at once.
  void reply.header('cache-control', 'no-cache');
}

export async function consoleRoutes(app: FastifyInstance, options: ConsoleOptions): Promise<void> {
  const root = options.root ?? CONSOLE_ROOT;
  app.addHook('onSend', async (_request, reply) => secureHeaders(reply));
  // The relative URLs in index.html resolve against /console/, not /.
  app.get('/console', { schema: { hide: true } }, (_request, reply) => reply.redirect('/console/', 301));
  if (!existsSync(`${root}/index.html`)) {
    const notBuilt = new VesselError('unavailable', 'the console is not built: run `npm run build:console`');
    app.get('/console/', { schema: { hide: true } }, (_request, reply) => sendError(reply, notBuilt));
    return;
  }
  await app.register(fastifyStatic, {
    root,
    prefix: '/console/',
    wildcard: false,
    index: ['index.html'],
    preCompressed: true,
    cacheControl: false,
    dotfiles: 'ignore',
    decorateReply: false,
  });
}
