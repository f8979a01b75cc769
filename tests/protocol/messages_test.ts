import { describe, test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";
import { ProtocolError } from "../../src/errors.ts";
import { encodeValue } from "../../src/protocol/encode_value.ts";
import { decodeMessage, type Message } from "../../src/protocol/messages.ts";
import { encodeMessage } from "../../src/protocol/encode_message.ts";
import { FRAME_HEADER_BYTES } from "../../src/protocol/frame_header.ts";
import { concat, difference, messageArb } from "./_arbitraries.ts";
import { checkMessage, fuzzTargets } from "./_fuzz.ts";

/** Decodes a head that holds `value`, as a frame would carry it. */
function decodeRecord(value: unknown): Message {
  const encoded = encodeValue(value);
  return decodeMessage({
    head: encoded.head,
    area: concat(encoded.attachments),
  });
}

function assertRefused(value: unknown, pattern: RegExp): void {
  assert.throws(() => decodeRecord(value), (error: unknown) => {
    assert.ok(error instanceof ProtocolError, String(error));
    assert.match(error.message, pattern);
    return true;
  });
}

function fromFrame(chunks: Uint8Array[]): Message {
  const bytes = concat(chunks);
  const view = new DataView(bytes.buffer, bytes.byteOffset);
  const head = view.getUint32(12);
  return decodeMessage({
    head: bytes.subarray(FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + head),
    area: bytes.subarray(FRAME_HEADER_BYTES + head),
  });
}

const HELLO = {
  type: "hello",
  id: 0,
  version: 1,
  pid: 4242,
  ops: ["query", "ingest"],
  runtime: "deno 2.9.6",
  concurrency: 16,
  idempotent: ["query"],
};

describe("encodeMessage() and decodeMessage()", () => {
  test("decodeMessage() gives back every message encodeMessage() framed, exactly", () => {
    fc.assert(
      fc.property(messageArb, (message) => {
        const back = fromFrame(encodeMessage(message));
        const d = difference(back, message);
        if (d !== undefined) assert.fail(d);
        checkMessage(back);
      }),
      { numRuns: 400 },
    );
  });

  test("decodeMessage() reads a hello with only the required fields, filling defaults", () => {
    assert.deepEqual(
      decodeRecord({ type: "hello", id: 0, version: 1, pid: 7 }),
      {
        type: "hello",
        id: 0,
        version: 1,
        pid: 7,
        ops: [],
        runtime: "unknown",
        concurrency: 1,
        idempotent: [],
      },
    );
  });

  test("decodeMessage() ignores unknown keys", () => {
    assert.deepEqual(
      decodeRecord({ type: "cancel", id: 3, future: { x: 1 } }),
      { type: "cancel", id: 3 },
    );
    assert.deepEqual(
      decodeRecord({ ...HELLO, extra: [1, 2] }),
      HELLO,
    );
  });

  test("decodeMessage() reads a call without args as a call with none", () => {
    assert.deepEqual(decodeRecord({ type: "call", id: 1, op: "x" }), {
      type: "call",
      id: 1,
      op: "x",
      args: [],
    });
  });

  test("decodeMessage() turns a fatal message's non-error into an Error", () => {
    const message = decodeRecord({
      type: "fatal",
      id: 0,
      phase: "definition",
      error: "no default export",
    });
    assert.equal(message.type, "fatal");
    assert.ok(message.type === "fatal" && message.error instanceof Error);
    assert.equal(
      message.type === "fatal" && message.error.message,
      "no default export",
    );
    const unknownPhase = decodeRecord({
      type: "fatal",
      id: 0,
      phase: "elsewhere",
      error: new TypeError("x"),
    });
    assert.equal(unknownPhase.type === "fatal" && unknownPhase.phase, "import");
  });

  test("encodeMessage() refuses a value that cannot cross, naming where it sits", () => {
    assert.throws(
      () =>
        encodeMessage({
          type: "call",
          id: 1,
          op: "x",
          args: [1, { onDone: () => 1 }],
        }),
      (error: unknown) =>
        error instanceof TypeError &&
        error.message ===
          "Cannot send args[1].onDone: a function cannot cross to the worker",
    );
  });

  test("encodeMessage() names the direction of a worker's message that cannot cross", () => {
    for (
      const message of [
        { type: "result", id: 1, value: { fn: () => 1 } },
        { type: "progress", id: 1, value: { fn: () => 1 } },
        { type: "items", id: 1, values: [{ fn: () => 1 }] },
      ] as Message[]
    ) {
      assert.throws(
        () => encodeMessage(message),
        (error: unknown) =>
          error instanceof TypeError &&
          /: a function cannot cross from the worker to the parent$/.test(
            error.message,
          ),
        message.type,
      );
    }
  });
});

describe("decodeMessage() refusals", () => {
  test("decodeMessage() refuses a head that is not a map", () => {
    for (const value of [[], 1, "call", null, new Map([["type", "call"]])]) {
      assertRefused(value, /not a map/);
    }
  });

  test("decodeMessage() refuses an unknown or missing type", () => {
    assertRefused({ type: "callx", id: 1 }, /unknown type "callx"/);
    assertRefused({ id: 1 }, /unknown type of kind undefined/);
    assertRefused({ type: 5, id: 1 }, /unknown type of kind number/);
  });

  test("decodeMessage() refuses invalid request ids", () => {
    for (
      const id of [-1, 1.5, NaN, Infinity, "1", null, 2 ** 53, 3n, undefined]
    ) {
      assertRefused({ type: "result", id, value: 1 }, /invalid id/);
    }
    for (const type of ["call", "result", "error", "cancel", "dropped"]) {
      assertRefused({ type, id: 0, op: "x" }, /reserved id 0/);
    }
    for (
      const type of [
        "hello",
        "fatal",
        "shutdown",
        "shutdown-ack",
        "ping",
        "pong",
        "pid",
      ]
    ) {
      assertRefused({ ...HELLO, type, id: 1 }, /must carry id 0/);
    }
  });

  test("decodeMessage() reads the pid message (version 5) and refuses a pid that is not a positive integer", () => {
    assert.deepEqual(decodeRecord({ type: "pid", id: 0, pid: 4242 }), {
      type: "pid",
      id: 0,
      pid: 4242,
    });
    for (const pid of [0, -1, 1.5, "7", null, undefined]) {
      assertRefused({ type: "pid", id: 0, pid }, /"pid" has an invalid "pid"/);
    }
  });

  test("decodeMessage() refuses a call without a string op or with args that are not a list", () => {
    assertRefused({ type: "call", id: 1 }, /no string "op"/);
    assertRefused({ type: "call", id: 1, op: 5 }, /no string "op"/);
    assertRefused({ type: "call", id: 1, op: "x", args: { 0: 1 } }, /args/);
  });

  test("decodeMessage() reads hellos of message versions 1 and 2", () => {
    for (const version of [1, 2]) {
      const hello = decodeRecord({ ...HELLO, version });
      assert.equal(hello.type === "hello" && hello.version, version);
    }
  });

  test("decodeMessage() reads the stream messages and a call's window", () => {
    assert.deepEqual(
      decodeRecord({
        type: "call",
        id: 3,
        op: "rows",
        args: [],
        windowItems: 8,
        windowBytes: 4096,
      }),
      {
        type: "call",
        id: 3,
        op: "rows",
        args: [],
        windowItems: 8,
        windowBytes: 4096,
      },
    );
    assert.deepEqual(decodeRecord({ type: "items", id: 3, values: [1, 2] }), {
      type: "items",
      id: 3,
      values: [1, 2],
    });
    assert.deepEqual(decodeRecord({ type: "end", id: 3 }), {
      type: "end",
      id: 3,
    });
    assert.deepEqual(
      decodeRecord({ type: "credit", id: 3, items: 2, bytes: 40 }),
      { type: "credit", id: 3, items: 2, bytes: 40 },
    );
    assert.deepEqual(
      decodeRecord({ type: "progress", id: 3, value: { done: 0.5 } }),
      { type: "progress", id: 3, value: { done: 0.5 } },
    );
  });

  test("decodeMessage() reads a limit, and refuses one without a positive whole concurrency or with a call id", () => {
    assert.deepEqual(decodeRecord({ type: "limit", id: 0, concurrency: 2 }), {
      type: "limit",
      id: 0,
      concurrency: 2,
    });
    assertRefused({ type: "limit", id: 0, concurrency: 0 }, /"concurrency" 0/);
    assertRefused({ type: "limit", id: 0, concurrency: 1.5 }, /"concurrency"/);
    assertRefused({ type: "limit", id: 0 }, /"concurrency"/);
    assertRefused({ type: "limit", id: 3, concurrency: 1 }, /limit/);
  });

  test("decodeMessage() refuses malformed stream messages and windows", () => {
    assertRefused({ type: "items", id: 3, values: [] }, /non-empty list/);
    assertRefused({ type: "items", id: 3, values: "x" }, /non-empty list/);
    assertRefused({ type: "items", id: 0, values: [1] }, /reserved id 0/);
    assertRefused({ type: "end", id: 0 }, /reserved id 0/);
    assertRefused({ type: "credit", id: 3, items: -1, bytes: 0 }, /"items"/);
    assertRefused({ type: "credit", id: 3, items: 1, bytes: 0.5 }, /"bytes"/);
    assertRefused({ type: "credit", id: 3, items: 1 }, /"bytes"/);
    assertRefused(
      { type: "call", id: 3, op: "rows", args: [], windowItems: 0 },
      /"windowItems" 0/,
    );
    assertRefused(
      { type: "call", id: 3, op: "rows", args: [], windowBytes: "big" },
      /"windowBytes" "big"/,
    );
  });

  test("decodeMessage() reads a call's W3C trace context and refuses a malformed one", () => {
    const traceparent =
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const call = { type: "call", id: 3, op: "q", args: [] };
    assert.deepEqual(decodeRecord({ ...call, trace: { traceparent } }), {
      ...call,
      trace: { traceparent },
    });
    assert.deepEqual(
      decodeRecord({ ...call, trace: { traceparent, tracestate: "a=b" } }),
      { ...call, trace: { traceparent, tracestate: "a=b" } },
    );
    assertRefused({ ...call, trace: "x" }, /invalid "trace"/);
    assertRefused({ ...call, trace: { traceparent: 1 } }, /invalid "trace"/);
    assertRefused(
      { ...call, trace: { traceparent, tracestate: 2 } },
      /invalid "trace"/,
    );
    assertRefused(
      { ...call, trace: { traceparent: "x".repeat(1025) } },
      /invalid "trace"/,
    );
  });

  test("decodeMessage() refuses a hello of another version, with both versions named", () => {
    assertRefused(
      { ...HELLO, version: 6 },
      /version 6, this parent speaks 1 to 5/,
    );
    assertRefused({ ...HELLO, version: 0 }, /version 0/);
    assertRefused({ ...HELLO, version: undefined }, /version undefined/);
  });

  test("decodeMessage() refuses a hello with an invalid pid, concurrency or op lists", () => {
    assertRefused({ ...HELLO, pid: -1 }, /invalid pid -1/);
    assertRefused({ ...HELLO, pid: "7" }, /invalid pid "7"/);
    assertRefused({ ...HELLO, concurrency: 0 }, /invalid concurrency 0/);
    assertRefused({ ...HELLO, concurrency: 1.5 }, /invalid concurrency/);
    assertRefused({ ...HELLO, ops: ["a", 1] }, /"ops" that is not a list/);
    assertRefused({ ...HELLO, idempotent: "a" }, /"idempotent"/);
  });
});

describe("message decoder fuzz (CI size; deno task fuzz runs 100,000 cases)", () => {
  for (const target of fuzzTargets()) {
    if (!target.name.startsWith("message decoder")) continue;
    test(`fuzz: ${target.name}`, () => {
      fc.assert(target.property, { numRuns: 300 * target.weight });
    });
  }
});
