// Hostile messages: well-formed CBOR whose fields are objects that cannot
// become strings ({ toString: "x" }: String() throws on it) is refused as a
// protocol error naming the field, never a stray TypeError. 0.1 threw
// "Cannot convert object to primitive value" while writing the refusal, so
// a worker answering { type: "result", id: { toString: "x" } } ended as
// "stdout could not be read" instead of a protocol error.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { ProtocolError, session, WorkerCrashedError } from "../../mod.ts";
import { encodeValue } from "../../src/protocol/encode_value.ts";
import { decodeMessage, MESSAGE_VERSION } from "../../src/protocol/messages.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { rejection } from "../_helpers/wait.ts";

checkNoLeaks();

const UNPRINTABLE = { toString: "x", valueOf: "y" };

/** A valid message of each type, and the fields decodeMessage checks. */
const MESSAGES: [Record<string, unknown>, string[]][] = [
  [{ type: "call", id: 1, op: "x", args: [] }, ["id", "op", "args"]],
  [{ type: "result", id: 1, value: 1 }, ["id"]],
  [{ type: "error", id: 1, error: new Error("e") }, ["id"]],
  [{ type: "cancel", id: 1 }, ["id"]],
  [{ type: "items", id: 1, values: [1] }, ["id", "values"]],
  [{ type: "end", id: 1 }, ["id"]],
  [{ type: "credit", id: 1, items: 1, bytes: 1 }, ["id", "items", "bytes"]],
  [{ type: "progress", id: 1, value: 1 }, ["id"]],
  [
    {
      type: "hello",
      id: 0,
      version: MESSAGE_VERSION,
      pid: 1,
      ops: [],
      runtime: "r",
      concurrency: 1,
      idempotent: [],
    },
    ["id", "version", "pid", "ops", "concurrency", "idempotent"],
  ],
  [
    { type: "fatal", id: 0, phase: "import", error: new Error("e") },
    ["id", "error"],
  ],
  [{ type: "limit", id: 0, concurrency: 1 }, ["id", "concurrency"]],
  [{ type: "shutdown", id: 0 }, ["id"]],
  [{ type: "shutdown-ack", id: 0 }, ["id"]],
];

describe("hostile messages", () => {
  test("decodeMessage() refuses an unprintable value in any checked field with a ProtocolError naming the field", () => {
    for (const [message, fields] of MESSAGES) {
      for (const field of [...fields, "type"]) {
        const encoded = encodeValue({ ...message, [field]: UNPRINTABLE });
        const head = encoded.head;
        let outcome: unknown;
        try {
          outcome = decodeMessage({ head, area: new Uint8Array(0) });
        } catch (error: unknown) {
          outcome = error;
        }
        const where = `${String(message.type)}.${field}`;
        if (message.type === "fatal" && field === "error") {
          // A fatal message's error may be any value: it becomes an Error.
          assert.ok(!(outcome instanceof Error), where);
          const fatal = outcome as { error: Error };
          assert.match(fatal.error.message, /non-error value: an object/);
          continue;
        }
        assert.ok(outcome instanceof ProtocolError, `${where}: ${outcome}`);
        assert.equal(outcome.cause, undefined, where);
        assert.match(outcome.message, /^Cannot read message: /, where);
      }
    }
  });

  test("session() a worker answering with an unprintable id or version fails the call with a ProtocolError-caused crash, then works", async () => {
    await using s = await session(
      fixture("security/hostile_message_worker.ts"),
      captureLog(),
    );
    for (
      const [message, field, pattern] of [
        [{ type: "result" }, "id", /"result" has an invalid id an object/],
        [{ type: "hello", id: 0 }, "version", /protocol version an object/],
        [{ type: "credit", id: 1, items: 1 }, "bytes", /invalid "bytes"/],
      ] as const
    ) {
      const error = await rejection(
        s.call("send", [message, field]),
        WorkerCrashedError,
      );
      assert.ok(error.cause instanceof ProtocolError, String(error.cause));
      assert.match(error.cause.message, pattern);
      assert.equal(await s.call("ok", []), "ok", "replaced by a fresh worker");
    }
  });
});
