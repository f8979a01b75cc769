// Streams on the in-memory runtime (tests/_memory_adapter.ts): the real
// session, connection and serve() over in-memory streams, no processes. The
// window's invariant is checked after every value taken, which a real
// process cannot show: the worker never runs more than the window ahead of
// the consumer, in values and in bytes. Process-level behaviour stays in
// stream_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { type CallOptions, session, WorkerCrashedError } from "../../mod.ts";
import { defineWorker } from "../../worker.ts";
import { memoryRuntime } from "../_memory_adapter.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { rejection, until } from "../_helpers/wait.ts";

const MODULE = fixture("memory_worker.ts");
const quiet = captureLog();

/** Produced counts, per in-memory worker run. */
const produced = { values: 0, finished: false };

function streamWorker() {
  return defineWorker({
    async *count(size: number) {
      produced.values = 0;
      produced.finished = false;
      try {
        while (true) {
          await Promise.resolve();
          produced.values++;
          yield size > 0 ? new Uint8Array(size) : produced.values - 1;
        }
      } finally {
        produced.finished = true;
      }
    },
  });
}

function runtime() {
  return memoryRuntime({ load: () => ({ default: streamWorker() }) });
}

type W = ReturnType<typeof streamWorker>;

describe("stream window (in memory)", () => {
  test("stream() the worker is never more than windowItems values ahead of the consumer", async () => {
    using _rt = runtime();
    await using s = await session<W>(MODULE, quiet);
    const window = 8;
    const iterator = s.stream("count", [0], { windowItems: window })[
      Symbol.asyncIterator
    ]();
    let taken = 0;
    let ahead = 0;
    for (; taken < 2_000; taken++) {
      const step = await iterator.next();
      assert.equal(step.value, taken);
      ahead = Math.max(ahead, produced.values - (taken + 1));
      assert.ok(
        produced.values <= taken + 1 + window + 1,
        `produced ${produced.values} after ${
          taken + 1
        } taken, window ${window}`,
      );
    }
    // Left alone, it fills the window and stops there.
    await until(
      () => produced.values >= taken + window - 2,
      10_000,
      "the window to fill",
    );
    assert.ok(produced.values <= taken + window + 1);
    assert.ok(ahead >= window / 4, `the worker ran ahead (${ahead})`);
    await iterator.return?.();
    await until(() => produced.finished, 10_000, "the generator's finally");
  });

  test("stream() the worker is never more than windowBytes (plus one message) ahead of the consumer", async () => {
    using _rt = runtime();
    await using s = await session<W>(MODULE, quiet);
    const size = 100 * 1024;
    const windowBytes = 256 * 1024;
    const iterator = s.stream("count", [size], { windowBytes })[
      Symbol.asyncIterator
    ]();
    for (let taken = 1; taken <= 200; taken++) {
      const step = await iterator.next();
      assert.equal((step.value as Uint8Array).byteLength, size);
      // In flight: under 256 KiB before the last message, which may add
      // what fits the rest of the window by the values' size: at most 4.
      assert.ok(
        produced.values - taken <= 5,
        `${produced.values - taken} values of 100 KiB ahead`,
      );
    }
    await iterator.return?.();
    await until(() => produced.finished, 10_000, "the generator's finally");
  });

  test("stream() a worker lost mid-stream fails the next value with WorkerCrashedError", async () => {
    using rt = runtime();
    await using s = await session<W>(MODULE, quiet);
    const iterator = s.stream("count", [0], { windowItems: 4 })[
      Symbol.asyncIterator
    ]();
    assert.equal((await iterator.next()).value, 0);
    rt.live()[0]?.crash("SIGKILL");
    const failure = await rejection(async () => {
      while (!(await iterator.next()).done) { /* drain what arrived */ }
    }, WorkerCrashedError);
    assert.equal(failure.signal, "SIGKILL");
    assert.equal(failure.op, "count");
  });

  test("stream() and call() refuse bad stream options with TypeError or RangeError, naming them", async () => {
    using _rt = runtime();
    await using s = await session<W>(MODULE, quiet);
    const iterate = async (options: unknown) => {
      for await (const _ of s.stream("count", [0], options as CallOptions)) {
        break;
      }
    };
    for (
      const [options, errorClass, name] of [
        [{ windowItems: 0 }, RangeError, "windowItems"],
        [{ windowItems: 1.5 }, RangeError, "windowItems"],
        [{ windowBytes: "4 MiB" }, TypeError, "windowBytes"],
        [{ totalTimeoutMs: -1 }, RangeError, "totalTimeoutMs"],
        [{ onProgress: "log" }, TypeError, "onProgress"],
      ] as const
    ) {
      const viaStream = await rejection(() => iterate(options), errorClass);
      assert.match(viaStream.message, new RegExp(`"${name}"`));
      const viaCall = await rejection(
        s.call("count", [0], options as unknown as CallOptions),
        errorClass,
      );
      assert.match(viaCall.message, new RegExp(`"${name}"`));
    }
  });
});
