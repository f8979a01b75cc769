// Streaming calls and progress, end to end through sessions, pools and
// oneShot, on real worker processes (tests/fixtures/stream_worker.ts).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import dc from "node:diagnostics_channel";
import {
  oneShot,
  pool,
  RemoteError,
  type Session,
  session,
  WorkerCrashedError,
  WorkerTimeoutError,
} from "../../mod.ts";
import type streamWorker from "../fixtures/stream_worker.ts";
import type { Row } from "../fixtures/stream_worker.ts";
import { liveWorkers } from "../../testing.ts";
import { defineWorker } from "../../worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { until, within } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("stream_worker.ts");
type W = typeof streamWorker;

/** The live worker processes of this fixture. */
function ours(): unknown[] {
  return liveWorkers().filter((w) => w.module.includes("stream_worker"));
}

let tokens = 0;
function token(): string {
  return `t${++tokens}`;
}

async function collect<T>(
  iterable: AsyncIterable<T>,
): Promise<{ values: T[]; error: unknown }> {
  const values: T[] = [];
  try {
    for await (const value of iterable) values.push(value);
  } catch (error: unknown) {
    return { values, error };
  }
  return { values, error: undefined };
}

/**
 * A session shared by the tests of one describe: a getter, and the hooks
 * that start and close it.
 */
function sharedSession(): [
  () => Session<W>,
  () => Promise<void>,
  () => Promise<void>,
] {
  let current: Session<W> | undefined;
  return [
    () => {
      assert.ok(current, "the shared session started");
      return current;
    },
    async () => {
      current = await session<W>(worker, captureLog());
    },
    async () => {
      await current?.close();
    },
  ];
}

/** Never called: `deno check` proves the typed proxy's stream types. */
function streamTypes(s: Session<W>): void {
  const rows: AsyncIterable<Row> = s.rows(1);
  const all: PromiseLike<Row[]> = s.rows(1);
  const counted: AsyncIterable<number> = s.stream("countSync", [1]);
  const plain: Promise<number[]> = s.plain();
  const whole: Promise<Row[]> = s.call("rows", [1]);
  // @ts-expect-error: a plain op's call is a promise, not an iterable
  const notStream: AsyncIterable<number> = s.plain();
  // @ts-expect-error: arguments are typed from the handler
  void s.stream("rows", ["many"]);
  void [rows, all, counted, plain, whole, notStream];
}
void streamTypes;

describe("streams in a session", () => {
  // One session serves the cases that need no fresh process (each uses
  // tokens of its own); those that kill the worker start their own.
  const [shared, open, close] = sharedSession();
  before(open);
  after(close);
  test("session() proxy streams an async generator's values in order with for await", async () => {
    const s = shared();
    const rows = [];
    for await (const row of s.rows(2500)) rows.push(row);
    assert.equal(rows.length, 2500);
    assert.deepEqual(rows[0], { id: 0, name: "row 0" });
    assert.ok(rows.every((row, i) => row.id === i), "in order");
  });

  test("session() stream() iterates a plain generator and an empty one", async () => {
    const s = shared();
    const { values } = await collect(s.stream("countSync", [5]));
    assert.deepEqual(values, [0, 1, 2, 3, 4]);
    assert.deepEqual((await collect(s.stream("empty", []))).values, []);
  });

  test("session() awaiting a streaming call gives all its values in an array", async () => {
    const s = shared();
    assert.deepEqual(await s.call("countSync", [3]), [0, 1, 2]);
    const rows = await s.rows(3);
    assert.deepEqual(rows.map((row) => row.id), [0, 1, 2]);
    assert.deepEqual(await s.plain(), [1, 2, 3], "a plain value as before");
  });

  test("session() iterating a call that returned a plain value fails with a TypeError", async () => {
    const s = shared();
    const { values, error } = await collect(s.stream("plain", []));
    assert.deepEqual(values, []);
    assert.ok(error instanceof TypeError, String(error));
    assert.match(error.message, /"plain".*not a stream/);
  });

  test("session() stream keeps the worker at most a window ahead of the consumer", async () => {
    const s = shared();
    const tag = token();
    const iterator = s.stream("endless", [tag], { windowItems: 16 })[
      Symbol.asyncIterator
    ]();
    let taken = 0;
    for (const target of [1, 5, 40, 41]) {
      while (taken < target) {
        const step = await iterator.next();
        assert.equal(step.value, taken);
        taken++;
      }
      // Once the window is full the worker waits: what it produced stays
      // within the window of what was taken.
      await until(
        async () => (await s.state(tag))!.produced >= taken + 12,
        15_000,
        "the worker to fill its window",
      );
      const { produced } = (await s.state(tag))!;
      assert.ok(
        produced <= taken + 16 + 1,
        `produced ${produced} after ${taken} taken, window 16`,
      );
    }
    await iterator.return?.();
    await until(
      async () => (await s.state(tag))!.finished,
      15_000,
      "the generator's finally",
    );
  });

  test("session() break ends the stream: the generator's finally runs in the worker", async () => {
    const s = shared();
    const tag = token();
    for await (const value of s.endless(tag)) {
      if (value === 10) break;
    }
    await until(
      async () => (await s.state(tag))?.finished === true,
      15_000,
      "the generator's finally",
    );
    assert.equal(await s.call("countSync", [2]).then(String), "0,1");
  });

  test("session() aborting a stream's signal rejects next() with the reason and runs finally", async () => {
    const s = shared();
    const tag = token();
    const controller = new AbortController();
    const reason = new Error("enough");
    const seen: number[] = [];
    let failure: unknown;
    try {
      for await (
        const value of s.stream("endless", [tag], {
          signal: controller.signal,
          windowItems: 4,
        })
      ) {
        seen.push(value);
        if (value === 3) controller.abort(reason);
      }
    } catch (error: unknown) {
      failure = error;
    }
    assert.equal(failure, reason);
    assert.ok(seen.length >= 4);
    await until(
      async () => (await s.state(tag))?.finished === true,
      15_000,
      "the generator's finally",
    );
  });

  test("session() an error thrown mid-stream rejects next() with RemoteError after the values", async () => {
    const s = shared();
    const { values, error } = await collect(s.failAfter(3));
    assert.deepEqual(values, [0, 1, 2]);
    assert.ok(error instanceof RemoteError, String(error));
    assert.equal(error.name, "CustomError");
    assert.equal(error.code, "E_STREAM");
    assert.equal(error.op, "failAfter");
  });

  test("session() a crash mid-stream rejects next() with WorkerCrashedError, never retried once a value arrived", async () => {
    await using s = await session<W>(worker, captureLog());
    const before = s.pid;
    const { values, error } = await collect(s.crashAfter(2));
    assert.deepEqual(values, [0, 1]);
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.signal, "SIGKILL");
    assert.equal(error.op, "crashAfter");
    // An idempotent stream that delivered a value is not retried either.
    const stream = s.hangAfter(2)[Symbol.asyncIterator]();
    assert.equal((await stream.next()).value, 0);
    await s.killSelfLater(20);
    const rest: number[] = [];
    let failure: unknown;
    try {
      for (
        let step = await stream.next();
        !step.done;
        step = await stream.next()
      ) {
        rest.push(step.value);
      }
    } catch (error: unknown) {
      failure = error;
    }
    assert.ok(failure instanceof WorkerCrashedError, String(failure));
    assert.ok(rest.length <= 1 && rest.every((v, i) => v === i + 1), `${rest}`);
    assert.notEqual(s.pid, before);
  });

  test("session() an idempotent stream lost before its first value is retried on a new worker", async () => {
    await using s = await session<W>(worker, captureLog());
    const before = s.pid;
    const pending = collect(s.delayed(1_000, 3));
    await s.killSelfLater(50);
    const { values, error } = await within(
      pending,
      30_000,
      "the retried stream",
    );
    assert.equal(error, undefined);
    assert.deepEqual(values, [0, 1, 2]);
    assert.notEqual(s.pid, before);
  });

  test("session() timeoutMs bounds the gap between values, not the consumer's time", async () => {
    const s = shared();
    const { values, error } = await collect(
      s.stream("hangAfter", [2], { timeoutMs: 400 }),
    );
    assert.deepEqual(values, [0, 1]);
    assert.ok(error instanceof WorkerTimeoutError, String(error));
    assert.equal(error.op, "hangAfter");
    // A consumer slower than timeoutMs does not time out the worker.
    const slowReader: number[] = [];
    for await (
      const row of s.stream("rows", [6], { timeoutMs: 150, windowItems: 2 })
    ) {
      slowReader.push(row.id);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    assert.deepEqual(slowReader, [0, 1, 2, 3, 4, 5]);
  });

  test("session() totalTimeoutMs bounds the whole stream", async () => {
    const s = shared();
    const started = Date.now();
    const { values, error } = await collect(
      s.stream("slow", [1000, 20], { totalTimeoutMs: 400 }),
    );
    assert.ok(error instanceof WorkerTimeoutError, String(error));
    assert.equal(error.timeoutMs, 400);
    assert.ok(values.length < 1000);
    assert.ok(Date.now() - started < 10_000);
  });
});

describe("progress", () => {
  const [shared, open, close] = sharedSession();
  before(open);
  after(close);
  test("call() onProgress receives throttled reports, the last one before the answer", async () => {
    const s = shared();
    const reports: unknown[] = [];
    const value = await s.call("report", [10_000], {
      onProgress: (report) => reports.push(report),
    });
    assert.equal(value, "done");
    assert.ok(reports.length >= 1 && reports.length < 100, `${reports.length}`);
    assert.equal(reports.at(-1), 10_000);
  });

  test("call() onProgress sees every report spaced wider than the throttle, and may throw", async () => {
    const s = shared();
    const reports: unknown[] = [];
    const value = await s.call("reportSlowly", [4, 80], {
      onProgress: (report) => {
        reports.push(report);
        throw new Error("a throwing callback does not break the call");
      },
    });
    assert.equal(value, 4);
    assert.deepEqual(
      reports,
      [1, 2, 3, 4].map((done) => ({ done, of: 4 })),
    );
  });
});

describe("streams in pools and oneShot", () => {
  test("defineWorker() refuses a handler named stream", () => {
    assert.throws(
      // @ts-expect-error: the type refuses a reserved name too
      () => defineWorker({ stream() {} }),
      (error: unknown) =>
        error instanceof TypeError &&
        /"stream" is reserved/.test(error.message),
    );
  });

  test("pool() a crash mid-stream fails it after its values; the pool serves on", async () => {
    await using p = pool<W>(worker, { ...captureLog(), max: 1 });
    const { values, error } = await collect(p.crashAfter(3));
    assert.deepEqual(values, [0, 1, 2]);
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.signal, "SIGKILL");
    const retried = await within(
      collect(p.delayed(10, 2)),
      30_000,
      "a stream after the crash",
    );
    assert.deepEqual(retried.values, [0, 1]);
    assert.equal(p.stats().crashed, 1);
  });

  test("session() a stream awaited as a whole restarts timeoutMs with every message", async () => {
    await using s = await session<W>(worker, captureLog());
    // 10 values 200 ms apart: 2 s in all, twice the timeout, and never
    // 1 s without a value (800 ms to spare for a loaded machine).
    const all = await s.call("slow", [10, 200], { timeoutMs: 1_000 });
    assert.deepEqual(all, Array.from({ length: 10 }, (_, i) => i));
  });

  test("pool() proxy streams before any worker started", async () => {
    await using p = pool<W>(worker, { ...captureLog(), max: 2 });
    const ids = [];
    for await (const row of p.rows(300)) ids.push(row.id);
    assert.equal(ids.length, 300);
    assert.equal(ids[299], 299);
  });

  for (const pipeline of [0, 2]) {
    test(`pool() a stream holds its worker's slot until it ends; ending it frees the slot (pipeline ${pipeline})`, async () => {
      await using p = pool<W>(worker, {
        ...captureLog(),
        max: 1,
        concurrency: 4,
        pipeline,
      });
      const tags = [token(), token(), token(), token()];
      const iterators = tags.map((tag) =>
        p.stream("endless", [tag], { windowItems: 2 })[Symbol.asyncIterator]()
      );
      try {
        for (const iterator of iterators) await iterator.next();
        const queued = p.whoami();
        // It waits in the pool's queue, where stats() shows it: with
        // pipelining too, nothing is written ahead behind a started stream.
        await until(
          () => p.stats().queued === 1,
          15_000,
          "the call to queue",
        );
        assert.equal(p.stats().perWorker[0]?.running, 4);
        await iterators[0]!.return?.();
        assert.equal(
          typeof await within(queued, 15_000, "the queued call"),
          "number",
        );
      } finally {
        // Endless streams left open would hold the pool's close forever.
        for (const iterator of iterators) await iterator.return?.();
      }
    });
  }

  test("oneShot() streams from a fresh process that exits when the stream ends", async () => {
    const fresh = oneShot<W>(worker, captureLog());
    const seen: number[] = [];
    const pids = new Set<number>();
    // Processes started, seen by airlock:worker:start. Counting the live
    // workers at each value was flaky, never an extra start: the worker may
    // write all four values and exit before the loop reads the first one
    // (counted 0 in 1 run of 7 here), and a count then said nothing.
    const starts: number[] = [];
    const onStart = (message: unknown) => {
      const event = message as { pid: number; module: string };
      if (event.module.includes("stream_worker")) starts.push(event.pid);
    };
    // Held: Bun drops a channel nothing refers to, with its subscribers.
    const channel = dc.channel("airlock:worker:start");
    channel.subscribe(onStart);
    try {
      for await (const item of fresh.withPid(4)) {
        seen.push(item.i);
        pids.add(item.pid);
        assert.ok(ours().length <= 1, "at most one process");
      }
    } finally {
      channel.unsubscribe(onStart);
    }
    assert.deepEqual(seen, [0, 1, 2, 3]);
    assert.equal(starts.length, 1, `one process started: ${starts}`);
    assert.equal(pids.size, 1, "every value from that one process");
    assert.deepEqual(ours(), [], "the process is gone when the loop ends");
    assert.deepEqual(
      (await collect(fresh.stream("withPid", [1]))).values.length,
      1,
    );
  });

  test("oneShot() break ends the stream and the process", async () => {
    const fresh = oneShot<W>(worker, captureLog());
    for await (const item of fresh.withPid(1_000_000)) {
      assert.equal(ours().length, 1);
      if (item.i === 5) break;
    }
    await until(() => ours().length === 0, 15_000, "the process to exit");
  });
});
