/**
 * Writes client/generated/openapi.ts: the SDK's types, generated with openapi-typescript from the
 * OpenAPI document exactly as the service serves it at /openapi.json. The document is taken from
 * the real API over the test harness (a real store, no VMs), so no service needs to run.
 *
 *   npm run generate:client
 *
 * test/unit/sdk-build.test.ts regenerates in memory and fails when the committed file differs.
 */
import { writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString, COMMENT_HEADER, type OpenAPI3 } from 'openapi-typescript';
import { apiHarness } from '../test/support/api-harness.js';

/** Compiled to dist/scripts/: two levels below the repository. */
const REPO_ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../..');
export const GENERATED_TYPES_PATH = join(REPO_ROOT, 'client/generated/openapi.ts');

/** GET /openapi.json of the real API. */
export async function servedDocument(): Promise<OpenAPI3> {
  const h = await apiHarness();
  try {
    const res = await h.app.inject({ method: 'GET', url: '/openapi.json' });
    if (res.statusCode !== 200) throw new Error(`/openapi.json answered ${res.statusCode}`);
    return JSON.parse(res.body) as OpenAPI3;
  } finally {
    await h.close();
  }
}

export async function generateClientTypes(): Promise<string> {
  const ast = await openapiTS(await servedDocument());
  return `${COMMENT_HEADER}// Regenerate with \`npm run generate:client\` (scripts/generate-client-types.ts).\n\n${astToString(ast)}`;
}

if (process.argv[1] !== undefined && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  writeFileSync(GENERATED_TYPES_PATH, await generateClientTypes());
  console.log(`wrote ${GENERATED_TYPES_PATH}`);
}
