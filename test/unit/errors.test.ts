import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ERROR_CODES, ERROR_STATUS } from '../../src/core/errors.js';
import { REPO_ROOT } from '../support/service.js';

test('every error code is in the spec and documented with its status in docs/api.md', () => {
  // The spec travels with the repository (docs/spec), so a clone anywhere can check against it.
  const spec = readFileSync(join(REPO_ROOT, 'docs/spec/runtime-api.md'), 'utf8');
  const docs = readFileSync(join(REPO_ROOT, 'docs/api.md'), 'utf8');
  for (const code of ERROR_CODES) {
    assert.ok(spec.includes(code), `${code} is a spec error code`);
    assert.match(docs, new RegExp(`\\| \`${code}\` \\| ${ERROR_STATUS[code]} \\|`), `${code} documented with ${ERROR_STATUS[code]}`);
  }
  assert.equal(ERROR_CODES.length, 12);
});
