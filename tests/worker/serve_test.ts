// The serve loop end to end: a real worker process (workers/entry.ts
// serving a fixture module) spawned with Deno.Command or Bun.spawn, spoken to
// in raw frames, with no parent API in between.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import fc from "fast-check";

import { type Message, MESSAGE_VERSION } from "../../src/protocol/messages.ts";
import {
  DEFAULT_MAX_FRAME_BYTES,
  FRAME_HEADER_BYTES,
  writeFrameHeader,
} from "../../src/protocol/frame_header.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME, testOn } from "../_helpers/runtime.ts";
import { within } from "../_helpers/wait.ts";
import { difference, valueArb } from "../protocol/_arbitraries.ts";
import { spawnRawWorker } from "./_raw_worker.ts";

checkNoLeaks();

const fixture = new URL(
  "../fixtures/reliability/serve_worker.ts",
  import.meta.url,
);
const OPS = [
  "echo",
  "print",
  "untilCancelled",
  "hold",
  "delay",
  "detached",
  "thenable",
];

function answer(id: number): (message: Message) => boolean {
  return (message) =>
    (message.type === "result" || message.type === "error") &&
    message.id === id;
}

function resultOf(message: Message): unknown {
  assert.equal(
    message.type,
    "result",
    `${message.type} ${message.id}: ${
      String((message as { error?: unknown }).error)
    }`,
  );
  return (message as { value: unknown }).value;
}

function errorOf(message: Message): Error {
  assert.equal(message.type, "error", `${message.type} ${message.id}`);
  const error = (message as { error: unknown }).error;
  assert.ok(error instanceof Error);
  return error;
}

const isHello = (message: Message) => message.type === "hello";

describe("serve() in a real worker process", () => {
  test("serve() says hello first: version, own pid, ops, runtime, concurrency, idempotent ops", async () => {
    await using worker = spawnRawWorker(fixture);
    const hello = await worker.next(() => true);
    const version = RUNTIME === "deno"
      ? Deno.version.deno
      : (globalThis as unknown as { Bun: { version: string } }).Bun.version;
    assert.deepEqual(hello, {
      type: "hello",
      id: 0,
      version: MESSAGE_VERSION,
      pid: worker.pid,
      ops: OPS,
      runtime: `${RUNTIME} ${version}`,
      concurrency: 16,
      idempotent: ["echo"],
    });
  });

  test("serve() answers calls carrying every supported type, a 64 MiB Uint8Array included", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    const values = fc.sample(valueArb, { numRuns: 60, seed: 42 });
    await Promise.all(
      values.map((value, i) =>
        worker.send({ type: "call", id: i + 1, op: "echo", args: [value] })
      ),
    );
    for (const [i, value] of values.entries()) {
      const back = resultOf(await worker.next(answer(i + 1)));
      const d = difference(back, value);
      if (d !== undefined) assert.fail(`value ${i}: ${d}`);
    }
    const big = new Uint8Array(64 * 1024 * 1024);
    for (let i = 0; i < big.length; i += 4093) big[i] = (i >> 12) & 0xff;
    big[big.length - 1] = 0xa5;
    await worker.send({ type: "call", id: 1000, op: "echo", args: [big] });
    const back = resultOf(await worker.next(answer(1000), 60_000));
    assert.ok(back instanceof Uint8Array);
    assert.equal(back.byteLength, big.byteLength);
    assert.ok(
      back.every((byte, i) => byte === big[i]),
      "all 64 MiB came back intact",
    );
  });

  test("serve() keeps frames decodable when a handler prints to stdout between them", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    await worker.send({
      type: "call",
      id: 1,
      op: "print",
      args: ["stray line\n"],
    });
    await worker.send({ type: "call", id: 2, op: "echo", args: ["after"] });
    assert.equal(resultOf(await worker.next(answer(1))), "printed");
    assert.equal(resultOf(await worker.next(answer(2))), "after");
    assert.equal(worker.stray(), "stray line\n");
  });

  test("serve() answers an unknown op with a TypeError listing the ops served", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    await worker.send({ type: "call", id: 5, op: "nope", args: [] });
    const error = errorOf(await worker.next(answer(5)));
    assert.equal(error.name, "TypeError");
    assert.match(error.message, /"nope"/);
    for (const op of OPS) assert.match(error.message, new RegExp(`"${op}"`));
  });

  test("serve() gives a handler a this whose progress, op and id work taken off it", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    await worker.send({ type: "call", id: 7, op: "detached", args: [] });
    const progress = await worker.next((message) =>
      message.type === "progress" && message.id === 7
    );
    assert.deepEqual(progress, { type: "progress", id: 7, value: "half" });
    assert.deepEqual(resultOf(await worker.next(answer(7))), {
      op: "detached",
      id: 7,
      aborted: false,
    });
  });

  test("serve() adopts a thenable a handler returns, and fails the call when its then getter throws", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    const kinds = ["resolves", "rejects", "getter throws"];
    for (const [i, kind] of kinds.entries()) {
      await worker.send({
        type: "call",
        id: i + 1,
        op: "thenable",
        args: [kind],
      });
    }
    assert.equal(resultOf(await worker.next(answer(1))), "adopted");
    const rejected = errorOf(await worker.next(answer(2)));
    assert.equal(rejected.name, "RangeError");
    assert.equal(rejected.message, "thenable rejected");
    const thrown = errorOf(await worker.next(answer(3)));
    assert.equal(thrown.name, "RangeError");
    assert.equal(thrown.message, "then getter");
    // The worker serves on.
    await worker.send({ type: "call", id: 4, op: "echo", args: [4] });
    assert.equal(resultOf(await worker.next(answer(4))), 4);
  });

  test("serve() aborts the handler's signal on cancel, ignores a cancel for an unknown id, and still answers", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    await worker.send({ type: "call", id: 1, op: "untilCancelled", args: [] });
    await worker.send({ type: "cancel", id: 99 });
    await worker.send({ type: "call", id: 2, op: "echo", args: ["running"] });
    assert.equal(resultOf(await worker.next(answer(2))), "running");
    await worker.send({ type: "cancel", id: 1 });
    assert.deepEqual(resultOf(await worker.next(answer(1))), {
      aborted: true,
      reason: "AbortError",
    });
    await worker.send({ type: "call", id: 3, op: "delay", args: [60_000, 1] });
    await worker.send({ type: "cancel", id: 3 });
    assert.equal(errorOf(await worker.next(answer(3))).name, "AbortError");
    assert.ok(!worker.received.some((m) => m.id === 99), "no answer to 99");
  });

  test("serve() on shutdown refuses new calls, drains those in flight, then acknowledges and exits 0", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    for (const id of [1, 2, 3]) {
      await worker.send({ type: "call", id, op: "hold", args: [150 + id] });
    }
    await worker.send({ type: "shutdown", id: 0 });
    await worker.send({ type: "call", id: 4, op: "echo", args: ["late"] });
    const exit = await within(worker.exited, 10_000, "exit after shutdown");
    assert.deepEqual(exit, { code: 0, signal: null });
    const order = worker.received.slice(1).map((m) => `${m.type} ${m.id}`);
    assert.equal(order.at(-1), "shutdown-ack 0", order.join(", "));
    assert.deepEqual(order.slice(0, -1).sort(), [
      "error 4",
      "result 1",
      "result 2",
      "result 3",
    ]);
    assert.equal(errorOf(await worker.next(answer(4))).name, "ShutdownError");
  });

  test("serve() exits promptly on end-of-file with a call still running", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    await worker.send({ type: "call", id: 1, op: "hold", args: [60_000] });
    await worker.send({ type: "call", id: 2, op: "echo", args: [1] });
    await worker.next(answer(2));
    const closed = Date.now();
    await worker.closeStdin();
    const exit = await within(worker.exited, 5_000, "exit on end-of-file");
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.ok(Date.now() - closed < 2_000, "promptly");
    assert.ok(!worker.received.some((m) => m.id === 1), "no answer to 1");
  });

  test("serve() answers ping with pong from its event loop, beside a running call", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    await worker.send({ type: "call", id: 1, op: "hold", args: [300] });
    await worker.send({ type: "ping", id: 0 });
    const first = await worker.next((m) => m.type === "pong" || m.id === 1);
    assert.equal(first.type, "pong", "answered before the call");
    assert.ok(resultOf(await worker.next(answer(1))));
  });

  test("serve() runs 16 calls at once by default: the 17th waits for one to finish, and a queued call can be cancelled", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    for (let id = 1; id <= 17; id++) {
      await worker.send({ type: "call", id, op: "hold", args: [300] });
    }
    await worker.send({ type: "call", id: 18, op: "hold", args: [300] });
    await worker.send({ type: "cancel", id: 18 });
    // Its only answer says it never started.
    const dropped = await worker.next((m) => m.id === 18);
    assert.equal(dropped.type, "dropped");
    const runs: { start: number; end: number }[] = [];
    for (let id = 1; id <= 17; id++) {
      runs.push(resultOf(await worker.next(answer(id))) as typeof runs[0]);
    }
    const first16 = runs.slice(0, 16);
    const last = runs[16]!;
    const firstEnd = Math.min(...first16.map((run) => run.end));
    const lastStart = Math.max(...first16.map((run) => run.start));
    assert.ok(lastStart < firstEnd, "the first 16 ran together");
    assert.ok(
      last.start >= firstEnd,
      `the 17th started at ${last.start}, before any of the first 16 ended (${firstEnd})`,
    );
  });

  test("serve() with the parent-death watchdog serves as usual and still exits promptly on end-of-file", async () => {
    await using worker = spawnRawWorker(fixture, { parentWatchdog: true });
    await worker.next(isHello);
    await worker.send({ type: "call", id: 1, op: "echo", args: ["watched"] });
    assert.equal(resultOf(await worker.next(answer(1))), "watched");
    await worker.closeStdin();
    const exit = await within(worker.exited, 5_000, "exit on end-of-file");
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.equal(worker.stray(), "");
    assert.equal(worker.stderr(), "");
  });

  test("serve() refuses a frame from the parent larger than the protocol's DEFAULT_MAX_FRAME_BYTES before allocating it, and exits 2", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    // A header claiming one byte more than the bound, and nothing after it.
    const header = new Uint8Array(FRAME_HEADER_BYTES);
    writeFrameHeader(header, 1, DEFAULT_MAX_FRAME_BYTES);
    await worker.sendBytes(header);
    const exit = await within(
      worker.exited,
      10_000,
      "exit on an oversize frame",
    );
    assert.deepEqual(exit, { code: 2, signal: null });
    assert.match(
      worker.stderr(),
      new RegExp(`exceeds maxFrameBytes ${DEFAULT_MAX_FRAME_BYTES}`),
    );
  });
});

describe("serve() start cost", () => {
  testOn(
    "deno",
    "serve() on Deno reads its stdin without building web streams (about 4 ms of every worker start)",
    async () => {
      await using worker = spawnRawWorker(
        new URL("../fixtures/stream_trap_worker.ts", import.meta.url),
      );
      await worker.next(isHello);
      await worker.send({ type: "call", id: 1, op: "touched", args: [] });
      assert.deepEqual(resultOf(await worker.next(answer(1))), {});
    },
  );

  test("serve() writes nothing but the hello before its first answer (the call path's warm-up is silent)", async () => {
    await using worker = spawnRawWorker(fixture);
    await worker.next(isHello);
    await worker.send({ type: "call", id: 1, op: "echo", args: ["first"] });
    assert.equal(resultOf(await worker.next(answer(1))), "first");
    assert.deepEqual(worker.received.map((m) => m.type), ["hello", "result"]);
    assert.equal(worker.stray(), "");
    assert.equal(worker.stderr(), "");
  });
});
