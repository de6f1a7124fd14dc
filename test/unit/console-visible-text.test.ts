/**
 * The console's audit table shows a guest's control characters instead of hiding them: an
 * audit whose host holds an OSC 52 clipboard write and whose reason holds a line erase comes out
 * of decisionOf (what the table's cells are made of) with control pictures, no raw control left.
 * The console is browser code: esbuild bundles the module first, as console-logic.test.ts does.
 */
import { test, before } from 'node:test';
import assert from 'node:assert/strict';
import { loadConsoleModules } from '../support/console-modules.js';

interface Decision {
  host: string;
  request: string;
  reason: string;
}
let decisionOf: (audit: unknown) => Decision;
let visible: (text: string) => string;

before(async () => {
  ({ decisionOf, visible } = await loadConsoleModules<{ decisionOf: typeof decisionOf; visible: typeof visible }>([
    "export { decisionOf } from './views/audits.js';",
    "export { visible } from './visible.js';",
  ]));
});

const RAW_CONTROL = /[\x00-\x1f\x7f-\x9f]/;

test('control pictures for C0 and DEL, <U+…> for C1; other text as it is', () => {
  assert.equal(visible('a\x1b]52;c;eA==\x07b\x7f\x9b\tü'), 'a\u241b]52;c;eA==\u2407b\u2421<U+009B>\u2409ü');
});

test("an audit's fields are shown with their control characters visible", () => {
  const audit = {
    payload: {
      egress: {
        kind: 'http_request',
        http_request: { action: 'deny', host: 'evil.example\x1b]52;c;b3duZWQ=\x07', ip: null, port: 80, method: 'GET', path: '/x\x1b[2K', status: 403, reason: '\x1b[2Khost_allowed' },
      },
    },
  };
  const d = decisionOf(audit);
  for (const value of Object.values(d)) assert.doesNotMatch(String(value), RAW_CONTROL);
  assert.equal(d.host, 'evil.example\u241b]52;c;b3duZWQ=\u2407');
  assert.equal(d.request, 'GET /x\u241b[2K 403');
  assert.equal(d.reason, '\u241b[2Khost_allowed');
});
