/**
 * The single source of the vessel-agent protocol's shared constants (docs/agent-protocol.md):
 * the framing, the frame types, the error kinds and the sizes of the fixed request parts that
 * both sides parse. The host imports it (frames.ts, messages.ts, guest-exec.ts);
 * scripts/generate-agent-protocol.ts writes guest/agent/protocol.h from it for the C agent
 * (`npm run generate:agent-protocol`), and test/unit/agent-protocol-source.test.ts fails when
 * the header on disk is not what this file generates. Changing a value here is a protocol
 * change: both sides change together, and the guest image is rebuilt (the header is part of
 * its recipe).
 *
 * Plain data on purpose: the generator walks it, so every entry carries its value and the
 * one-line reason the C header repeats as a comment.
 */

export interface Constant {
  readonly value: number;
  readonly doc: string;
  /** How C spells it: hex for bytes and codes, an unsigned literal where C compares it with sizes. */
  readonly c?: 'hex' | 'unsigned';
}

export const WIRE = {
  PROTOCOL_VERSION: { value: 1, doc: 'what HELLO and HELLO_ACK carry' },
  FRAME_MAGIC: { value: 0x56, doc: "'V', first byte of every frame header", c: 'hex' },
  FRAME_END: {
    value: 0x0a,
    doc: "the byte after every payload: a frame cut short and completed by the host's 0xFF resync filler fails this check and is never acted on",
    c: 'hex',
  },
  HEADER_BYTES: { value: 12, doc: 'magic, type, flags, a zero byte, stream id (u32), payload length (u32)' },
  MAX_PAYLOAD: { value: 65536, doc: 'bounds what either side buffers for one frame', c: 'unsigned' },
  NONCE_BYTES: { value: 16, doc: "the host's random nonce in HELLO, echoed by HELLO_ACK" },
  HELLO_BYTES: { value: 20, doc: 'HELLO: version (u16), 2 reserved bytes, the nonce' },
  HELLO_ACK_BYTES: { value: 40, doc: "HELLO_ACK: the nonce, version, the agent's limits" },
  FLAG_EOF: { value: 0x01, doc: 'on DATA: the last bytes of the stream (stdin closed, file complete)', c: 'hex' },
  SPAWN_FIXED_BYTES: { value: 20, doc: "SPAWN's fixed part: flags, ring, window (u32 each), rows, cols, argc, envc (u16 each)" },
  SPAWN_AS_USER: { value: 0x10, doc: 'SPAWN flag: the strings are followed by uid, gid (u32 each), a group count (u16) and the groups (u32 each)', c: 'hex' },
  SPAWN_MAX_GROUPS: { value: 256, doc: 'supplementary groups SPAWN_AS_USER may carry' },
} as const satisfies Record<string, Constant>;

/** What the agent hunts for after a malformed frame or a disconnection ('V' occurs once in it, so a restartable scan finds it). */
export const SYNC_MAGIC_TEXT = 'VSYNC!\r\n';

/** Host-to-agent frame types. WINDOW and DATA go both ways. */
export const HOST_FRAME_TYPES = {
  HELLO: 0x01,
  PING: 0x02,
  WINDOW: 0x03,
  DATA: 0x04,
  CANCEL: 0x05,
  SPAWN: 0x10,
  ATTACH: 0x11,
  SIGNAL: 0x12,
  RESIZE: 0x13,
  LIST_PROCS: 0x14,
  FORGET: 0x15,
  READ_FILE: 0x20,
  WRITE_FILE: 0x21,
  STAT: 0x22,
  LIST_DIR: 0x23,
  MKDIR: 0x24,
  REMOVE: 0x25,
  IDENTITY: 0x30,
  SHUTDOWN: 0x31,
} as const;

/** Agent-to-host frame types: nothing else is accepted from a guest. */
export const AGENT_FRAME_TYPES_BY_NAME = {
  WINDOW: 0x03,
  DATA: 0x04,
  HELLO_ACK: 0x81,
  OUTPUT: 0x85,
  PROC: 0x86,
  EXIT: 0x87,
  STAT: 0x88,
  DIR: 0x89,
  END: 0x8e,
  ERROR: 0x8f,
} as const;

/** The kind an ERROR frame carries, with what it means. */
export const ERROR_KINDS = {
  ERRNO: { value: 1, doc: 'a system call failed; errno and the message name it' },
  BAD_REQUEST: { value: 2, doc: 'a payload that does not parse, an unknown type, a relative path' },
  LIMIT: { value: 3, doc: 'too many streams or processes' },
  NO_PROCESS: { value: 4, doc: 'no process with that id (never spawned, or forgotten)' },
  OUT_OF_RANGE: { value: 5, doc: 'an ATTACH offset outside what the ring retains' },
  CWD: { value: 6, doc: 'SPAWN: the working directory could not be entered (errno)' },
  EXEC: { value: 7, doc: 'SPAWN: the program could not be executed (errno)' },
  PROTOCOL: { value: 8, doc: 'stream 0: a malformed frame; the agent is hunting for SYNC_MAGIC' },
  USER: { value: 9, doc: "SPAWN: the process could not take the user's groups or ids (errno)" },
} as const satisfies Record<string, Constant>;
