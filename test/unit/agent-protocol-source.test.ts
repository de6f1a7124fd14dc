/**
 * The agent protocol has one source, src/vm/agent/protocol.ts: guest/agent/protocol.h on disk is
 * exactly what scripts/generate-agent-protocol.ts makes of it (a hand edit or a forgotten
 * `npm run generate:agent-protocol` fails here), the host's constants are the schema's, no C
 * file defines a schema constant again, and the wire values are the ones agents in existing
 * images speak (changing one is a protocol change, to be made here on purpose).
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { generateProtocolHeader, headerOnDisk, PROTOCOL_HEADER_PATH } from '../../scripts/generate-agent-protocol.js';
import { AGENT_SOURCE_DIR, AGENT_SOURCE_FILES } from '../../src/vm/agent/build.js';
import * as frames from '../../src/vm/agent/frames.js';
import { ErrorKind } from '../../src/vm/agent/messages.js';
import { AGENT_FRAME_TYPES_BY_NAME, ERROR_KINDS, HOST_FRAME_TYPES, SYNC_MAGIC_TEXT, WIRE } from '../../src/vm/agent/protocol.js';

test('guest/agent/protocol.h is what the schema generates', () => {
  assert.equal(headerOnDisk(), generateProtocolHeader(), `${PROTOCOL_HEADER_PATH} differs from src/vm/agent/protocol.ts: run \`npm run generate:agent-protocol\` (and never edit the header by hand)`);
});

test("the host's protocol constants are the schema's", () => {
  for (const name of ['FRAME_MAGIC', 'FRAME_END', 'HEADER_BYTES', 'MAX_PAYLOAD', 'PROTOCOL_VERSION', 'NONCE_BYTES', 'HELLO_BYTES', 'HELLO_ACK_BYTES', 'SPAWN_FIXED_BYTES', 'FLAG_EOF'] as const) {
    assert.equal(frames[name], WIRE[name].value, name);
  }
  assert.deepEqual(frames.SYNC_MAGIC, Buffer.from(SYNC_MAGIC_TEXT, 'latin1'));
  assert.deepEqual(frames.T, HOST_FRAME_TYPES);
  assert.deepEqual(frames.R, AGENT_FRAME_TYPES_BY_NAME);
  assert.deepEqual(ErrorKind, Object.fromEntries(Object.entries(ERROR_KINDS).map(([k, v]) => [k, v.value])));
  assert.deepEqual([...frames.AGENT_FRAME_TYPES].sort(), Object.values(AGENT_FRAME_TYPES_BY_NAME).sort());
});

test('the header is part of the agent build and its recipe hash', () => {
  assert.ok((AGENT_SOURCE_FILES as readonly string[]).includes('protocol.h'));
  assert.match(readFileSync(join(AGENT_SOURCE_DIR, 'agent.h'), 'utf8'), /#include "protocol\.h"/);
});

test('no C file of the agent defines a schema constant again', () => {
  const names = [
    ...Object.keys(WIRE),
    'SYNC_MAGIC',
    'SYNC_MAGIC_BYTES',
    ...Object.keys(HOST_FRAME_TYPES).map((n) => `T_${n}`),
    ...Object.keys(AGENT_FRAME_TYPES_BY_NAME).map((n) => `R_${n}`),
    ...Object.keys(ERROR_KINDS).map((n) => `E_${n}`),
  ];
  for (const file of AGENT_SOURCE_FILES.filter((f) => f !== 'protocol.h')) {
    const text = readFileSync(join(AGENT_SOURCE_DIR, file), 'utf8');
    for (const name of names) {
      assert.doesNotMatch(text, new RegExp(`#\\s*define\\s+${name}\\b|\\b${name}\\s*=[^=]`), `${file} defines ${name}: it belongs in src/vm/agent/protocol.ts`);
    }
  }
});

test('the wire values are the ones deployed agents speak', () => {
  // Pinned on purpose: a change here is a protocol change (docs/agent-protocol.md), not a refactor.
  assert.deepEqual(Object.fromEntries(Object.entries(WIRE).map(([k, v]) => [k, v.value])), {
    PROTOCOL_VERSION: 1,
    FRAME_MAGIC: 0x56,
    FRAME_END: 0x0a,
    HEADER_BYTES: 12,
    MAX_PAYLOAD: 65536,
    NONCE_BYTES: 16,
    HELLO_BYTES: 20,
    HELLO_ACK_BYTES: 40,
    FLAG_EOF: 0x01,
    SPAWN_FIXED_BYTES: 20,
    SPAWN_AS_USER: 0x10,
    SPAWN_MAX_GROUPS: 256,
  });
  assert.equal(SYNC_MAGIC_TEXT, 'VSYNC!\r\n');
  assert.deepEqual(Object.values(HOST_FRAME_TYPES), [0x01, 0x02, 0x03, 0x04, 0x05, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x20, 0x21, 0x22, 0x23, 0x24, 0x25, 0x30, 0x31]);
  assert.deepEqual(Object.values(AGENT_FRAME_TYPES_BY_NAME), [0x03, 0x04, 0x81, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8e, 0x8f]);
  assert.deepEqual(Object.values(ERROR_KINDS).map((k) => k.value), [1, 2, 3, 4, 5, 6, 7, 8, 9]);
});
