// Decode amplification: a frame whose bytes are few and whose value is huge
// (the byte 0x80 is an empty array, some 40 bytes of memory once built; a
// ten-byte attachment reference can copy megabytes) is refused with a
// ProtocolError once building it would pass its budget (64 MiB plus 8 bytes
// per byte of the frame), before that memory is allocated. 0.1 built
// whatever the bytes described: a 100 MB frame of empty maps crashed a Deno
// parent out of memory, 5 MB of empty arrays cost it 470 MiB.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { ProtocolError, session, WorkerCrashedError } from "../../mod.ts";
import { decodeValue } from "../../src/protocol/decode_value.ts";
import {
  DECODE_BASE_BYTES,
  DECODE_BYTES_PER_FRAME_BYTE,
} from "../../src/protocol/_decode_budget.ts";
import { readRssBytes } from "../../src/runtime/proc.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { rejection } from "../_helpers/wait.ts";
import {
  AMPLIFIER_AREA_BYTES,
  AMPLIFIERS,
  cborHead,
  concat,
  repeated,
} from "../protocol/_arbitraries.ts";

checkNoLeaks();

const MiB = 1024 * 1024;

const AREA = new Uint8Array(AMPLIFIER_AREA_BYTES);

function bytes(...values: number[]): Uint8Array {
  return new Uint8Array(values);
}

/** Tag 27000 [0, length]: the first `length` bytes of the attachment area. */
function attachment(length: number): Uint8Array {
  return concat([bytes(0xd9, 0x69, 0x78, 0x82, 0x00), cborHead(0, length)]);
}

describe("decode amplification", () => {
  test("decodeValue() refuses 3 MiB of empty arrays at the default budget, naming the budget", async () => {
    const head = repeated(bytes(0x80), 3 * MiB);
    const error = await rejection(() => decodeValue(head), ProtocolError);
    const budget = DECODE_BASE_BYTES +
      DECODE_BYTES_PER_FRAME_BYTE * head.byteLength;
    assert.match(
      error.message,
      new RegExp(
        `^Cannot decode value: building the value would take more than ${budget} bytes of memory, the budget of a ${head.byteLength}-byte frame`,
      ),
    );
    assert.equal(error.cause, undefined);
  });

  test("decodeValue() charges every kind of value it builds against maxBuildBytes", async () => {
    for (const [kind, item] of Object.entries(AMPLIFIERS)) {
      const few = repeated(item, 8);
      assert.equal(
        (decodeValue(few, AREA, { maxBuildBytes: MiB }) as unknown[]).length,
        8,
        `8 of ${kind} fit in 1 MiB`,
      );
      const many = repeated(item, 100_000);
      const error = await rejection(
        () => decodeValue(many, AREA, { maxBuildBytes: MiB }),
        ProtocolError,
      );
      assert.match(error.message, /bytes of memory/, kind);
    }
  });

  test("decodeValue() charges each copy of one attachment, so references cannot multiply it", async () => {
    // 2,000 references of ten bytes each to one 64 KiB attachment, each an
    // ArrayBuffer (always a copy): 131 MB built from 86 KB of frame.
    const area = new Uint8Array(64 * 1024);
    const item = concat([
      bytes(0xd9, 0x69, 0x7a),
      attachment(area.byteLength),
    ]);
    const head = repeated(item, 2_000);
    const error = await rejection(
      () => decodeValue(head, area),
      ProtocolError,
    );
    assert.match(error.message, /bytes of memory/);
    // The same frame with every reference a view (no copy) is fine.
    const views = repeated(attachment(area.byteLength), 2_000);
    assert.equal((decodeValue(views, area) as unknown[]).length, 2_000);
  });

  test("decodeValue() builds a large plain value past the 64 MiB base, since the budget grows with the frame", () => {
    // 9 Mi small integers: 72 MiB of array slots by the estimate.
    const count = 9 * MiB;
    const head = repeated(bytes(0x07), count);
    const value = decodeValue(head) as number[];
    assert.equal(value.length, count);
    assert.equal(value[count - 1], 7);
  });

  test("session() a worker returning 3 Mi empty arrays fails the call with a ProtocolError-caused crash, and the parent stays small", async () => {
    await using s = await session(
      fixture("security/amplifying_worker.ts"),
      captureLog(),
    );
    const before = readRssBytes(process.pid) ?? 0;
    const error = await rejection(
      s.call("emptyArrays", [3 * MiB]),
      WorkerCrashedError,
    );
    assert.ok(error.cause instanceof ProtocolError, String(error.cause));
    assert.match(error.cause.message, /bytes of memory/);
    const grown = (readRssBytes(process.pid) ?? 0) - before;
    assert.ok(grown < 512 * MiB, `parent RSS grew ${grown} bytes`);
    assert.equal(await s.call("ok", []), "ok", "replaced by a fresh worker");
  });
});
