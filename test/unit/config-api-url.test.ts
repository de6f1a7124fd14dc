/** VESSEL_API_URL: the API nodes an enrolled VM host asks to unseal its secrets (docs/scaling.md). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/cli/config.js';

test('VESSEL_API_URL takes origins, one or several; a path, query or credentials are refused, since the host signs the path it calls', () => {
  assert.deepEqual(loadConfig({}).fleet.apiUrls, []);
  assert.deepEqual(loadConfig({ VESSEL_API_URL: 'http://vessel-api.vessel.svc' }).fleet.apiUrls, ['http://vessel-api.vessel.svc']);
  assert.deepEqual(loadConfig({ VESSEL_API_URL: 'https://api-1:8080/, http://10.0.0.2:8080' }).fleet.apiUrls, ['https://api-1:8080', 'http://10.0.0.2:8080']);
  for (const bad of ['http://api/vessel', 'http://api/?x=1', 'http://u:p@api', 'ftp://api', 'api:8080/x', 'not a url']) {
    assert.throws(() => loadConfig({ VESSEL_API_URL: bad }), /VESSEL_API_URL/, bad);
  }
});
