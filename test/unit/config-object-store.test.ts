/** VESSEL_OBJECT_STORE_*: the S3 endpoint, bucket, region and keys for checkpoints (docs/scaling.md, "Object storage"). */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { loadConfig } from '../../src/cli/config.js';

test('object storage is off unless its URL is set; then it needs a bucket, and keys come both or neither', () => {
  assert.equal(loadConfig({}).objectStore, null);
  assert.deepEqual(loadConfig({ VESSEL_OBJECT_STORE_URL: 'https://s3.eu-west-1.amazonaws.com', VESSEL_OBJECT_STORE_BUCKET: 'vessel-checkpoints', VESSEL_OBJECT_STORE_REGION: 'eu-west-1' }).objectStore, {
    endpoint: 'https://s3.eu-west-1.amazonaws.com',
    bucket: 'vessel-checkpoints',
    region: 'eu-west-1',
    credentials: null,
  });
  const withKeys = loadConfig({ VESSEL_OBJECT_STORE_URL: 'http://127.0.0.1:7480/', VESSEL_OBJECT_STORE_BUCKET: 'b.1-x', VESSEL_OBJECT_STORE_ACCESS_KEY_ID: 'AK', VESSEL_OBJECT_STORE_SECRET_ACCESS_KEY: 'SK' }).objectStore;
  assert.deepEqual(withKeys, { endpoint: 'http://127.0.0.1:7480', bucket: 'b.1-x', region: 'us-east-1', credentials: { accessKeyId: 'AK', secretAccessKey: 'SK' } });
  const url = { VESSEL_OBJECT_STORE_URL: 'http://127.0.0.1:7480' };
  assert.throws(() => loadConfig(url), /VESSEL_OBJECT_STORE_BUCKET must name a bucket/);
  for (const bucket of ['Upper', 'a', 'under_score', '-dash', `${'x'.repeat(64)}`]) assert.throws(() => loadConfig({ ...url, VESSEL_OBJECT_STORE_BUCKET: bucket }), /VESSEL_OBJECT_STORE_BUCKET/, bucket);
  for (const bad of ['http://s3/bucket', 'http://k:s@s3', 'ftp://s3', 's3:7480', 'not a url', 'http://s3/?x=1']) {
    assert.throws(() => loadConfig({ VESSEL_OBJECT_STORE_URL: bad, VESSEL_OBJECT_STORE_BUCKET: 'vessel' }), /VESSEL_OBJECT_STORE_URL/, bad);
  }
  assert.throws(() => loadConfig({ ...url, VESSEL_OBJECT_STORE_BUCKET: 'vessel', VESSEL_OBJECT_STORE_ACCESS_KEY_ID: 'AK' }), /go together/);
});
