// session() scheduling on the in-memory runtime (tests/_memory_adapter.ts):
// the real session, connection and serve() over in-memory streams, no
// processes. Concurrency, crashes and retries, setup replay, deadlines,
// aborts, restart, close and start failures, in milliseconds. What needs
// real processes (signals sent by the worker itself, pipes that fill, stderr
// of a dying process, environment, cwd, runtimes) stays in session_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  session,
  SessionClosedError,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../../mod.ts";
import type memory from "../fixtures/memory_worker.ts";
import { memoryWorker, seen } from "../fixtures/memory_worker.ts";
import {
  memoryRuntime,
  type MemoryRuntimeOptions,
} from "../_memory_adapter.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

const MODULE = fixture("memory_worker.ts");
const quiet = captureLog();

/** An in-memory runtime whose workers are fresh memory_worker definitions. */
function runtime(
  idempotent: string[] = [],
  options: MemoryRuntimeOptions = {},
) {
  return memoryRuntime({
    load: (child) => ({ default: memoryWorker(child.pid, { idempotent }) }),
    ...options,
  });
}

describe("session() calls and crashes (in memory)", () => {
  test("session() 25 concurrent calls with mixed delays each get their own answer", async () => {
    using _rt = runtime();
    await using s = await session<typeof memory>(MODULE, quiet);
    const delays = Array.from({ length: 25 }, (_, i) => (i * 7) % 11);
    const answers = await within(
      Promise.all(delays.map((ms, i) => s.delay(ms, i))),
      10_000,
      "25 calls",
    );
    assert.deepEqual(answers, delays.map((_, i) => i));
    assert.equal(s.stats().completed, 25);
  });

  test("session() a crash with 8 calls pending fails all 8, then the next call runs on a new worker", async () => {
    using rt = runtime();
    await using s = await session<typeof memory>(MODULE, quiet);
    const before = s.pid;
    const pending = Array.from({ length: 8 }, () => s.call("hang", []));
    await until(() => s.stats().inFlight === 8, 10_000, "8 calls written");
    rt.live()[0]?.crash("SIGKILL");
    for (const call of pending) {
      const error = await rejection(call, WorkerCrashedError);
      assert.equal(error.signal, "SIGKILL");
      assert.equal(error.exitCode, null);
      assert.equal(error.pid, before);
      assert.equal(error.op, "hang");
      assert.match(error.hint ?? "", /killed from outside|out-of-memory/);
    }
    assert.equal(await s.add(1, 2), 3);
    assert.notEqual(s.pid, before);
    assert.equal(s.pid, rt.children[1]?.pid);
    assert.equal(s.stats().crashed, 1);
    assert.equal(s.stats().restarts, 1);
  });

  test("session() reports the exit code of a worker that exits", async () => {
    using rt = runtime();
    await using s = await session<typeof memory>(MODULE, quiet);
    const call = s.hang();
    await until(() => s.stats().inFlight === 1, 10_000, "call written");
    rt.live()[0]?.exit(3);
    const error = await rejection(call, WorkerCrashedError);
    assert.equal(error.exitCode, 3);
    assert.equal(error.signal, null);
  });

  test("session() replays setup on every start and retries idempotent calls lost in a crash", async () => {
    using rt = runtime(["delay"]);
    await using s = await session<typeof memory>(MODULE, {
      ...quiet,
      setup: [["count"], ["count"]],
    });
    assert.equal(await s.count(), 3, "setup ran twice before");
    const idempotent = s.delay(30, "survived");
    const other = s.call("hang", []);
    await until(() => s.stats().inFlight === 2, 10_000, "calls written");
    rt.live()[0]?.crash("SIGKILL");
    assert.equal(await within(idempotent, 10_000, "retried"), "survived");
    const lost = await rejection(other, WorkerCrashedError);
    assert.equal(lost.op, "hang");
    assert.equal(await s.count(), 3, "setup replayed on the new worker");
  });
});

describe("session() timeouts and cancellation (in memory)", () => {
  test("session() one timeout keeps the worker, two in a row replace it", async () => {
    using _rt = runtime();
    await using s = await session<typeof memory>(MODULE, {
      ...quiet,
      cancelGraceMs: 60_000,
    });
    const first = s.pid;
    const t1 = await rejection(
      s.call("hang", [], { timeoutMs: 20 }),
      WorkerTimeoutError,
    );
    assert.equal(t1.op, "hang");
    assert.equal(t1.phase, "call");
    assert.equal(t1.timeoutMs, 20);
    assert.ok(t1.elapsedMs >= 15, `elapsed ${t1.elapsedMs}`);
    assert.equal(await s.add(1, 1), 2);
    assert.equal(s.pid, first, "one timeout keeps the worker");
    const bystander = s.call("hang", []);
    await s.call("hang", [], { timeoutMs: 20 }).catch(() => {});
    await s.call("hang", [], { timeoutMs: 20 }).catch(() => {});
    const lost = await rejection(
      within(bystander, 10_000, "bystander"),
      WorkerCrashedError,
    );
    assert.match(lost.reason ?? "", /"hang".*timed out twice/);
    assert.equal(await s.add(2, 2), 4);
    assert.notEqual(s.pid, first, "two timeouts in a row replace it");
    assert.ok(s.stats().timeouts >= 3);
  });

  test("session() abort rejects with signal.reason at once and the handler's signal fires", async () => {
    using _rt = runtime();
    await using s = await session<typeof memory>(MODULE, quiet);
    const controller = new AbortController();
    const call = s.call("untilCancelled", [], { signal: controller.signal });
    await until(() => s.stats().inFlight === 1, 10_000, "call written");
    const reason = new Error("user gave up");
    controller.abort(reason);
    assert.equal(await rejection(call, Error), reason);
    await until(
      () => seen.includes(`${s.pid} cancelled`),
      10_000,
      "handler saw the abort",
    );
    const pid = s.pid;
    assert.equal(await s.add(1, 1), 2);
    assert.equal(s.pid, pid, "a handler that stops keeps its worker");
    const early = await rejection(
      s.call("add", [1, 1], { signal: AbortSignal.abort(new Error("late")) }),
      Error,
    );
    assert.equal(early.message, "late");
  });

  test("session() a cancelled call that does not stop is killed after the grace period", async () => {
    using rt = runtime();
    await using s = await session<typeof memory>(MODULE, {
      ...quiet,
      cancelGraceMs: 20,
    });
    const first = s.pid;
    const controller = new AbortController();
    const stuck = s.call("hang", [], { signal: controller.signal });
    const bystander = s.call("hang", []);
    controller.abort();
    const reason = await rejection(stuck, Error);
    assert.equal(reason.name, "AbortError");
    const lost = await rejection(
      within(bystander, 10_000, "bystander"),
      WorkerCrashedError,
    );
    assert.match(lost.reason ?? "", /cancelled call "hang".*20 ms/);
    assert.equal(rt.children[0]?.status?.signal, "SIGKILL");
    assert.equal(await s.add(1, 1), 2);
    assert.notEqual(s.pid, first);
  });
});

describe("session() restart, close and start failures (in memory)", () => {
  test("session() restart() gives a new worker after calls in flight finish", async () => {
    using rt = runtime();
    await using s = await session<typeof memory>(MODULE, {
      ...quiet,
      setup: [["count"]],
    });
    const first = s.pid;
    const inFlight = s.delay(20, "finished");
    const restarted = s.restart();
    const during = s.whoami();
    assert.equal(await inFlight, "finished");
    await restarted;
    assert.notEqual(s.pid, first);
    assert.equal(
      await during,
      s.pid,
      "calls made meanwhile run on the new one",
    );
    assert.equal(await s.count(), 2, "setup replayed");
    assert.equal(s.stats().restarts, 1);
    await within(rt.children[0]!.exited, 10_000, "the old worker ends");
  });

  test("session() close() drains, ends the worker, and refuses later calls", async () => {
    using rt = runtime();
    const s = await session<typeof memory>(MODULE, quiet);
    const inFlight = s.delay(20, "drained");
    await s.close();
    assert.equal(await inFlight, "drained");
    assert.deepEqual(rt.live(), []);
    const error = await rejection(s.add(1, 1), SessionClosedError);
    assert.equal(error.op, "add");
    await s.close();
  });

  test("session() a module that throws at import fails the start, not retried", async () => {
    using rt = runtime([], {
      load: () => {
        throw new Error("cannot open the index");
      },
    });
    const error = await rejection(session(MODULE, quiet), WorkerStartError);
    assert.equal(error.failure, "import");
    assert.match(error.message, /cannot open the index/);
    assert.equal(rt.children.length, 1, "no respawn");
  });

  test("session() a module without a worker definition fails the start", async () => {
    using _rt = runtime([], { load: () => ({ default: 42 }) });
    const error = await rejection(session(MODULE, quiet), WorkerStartError);
    assert.equal(error.failure, "definition");
  });

  test("session() a worker that exits before ready is respawned maxRetries times, then fails", async () => {
    using rt = runtime([], {
      load: (child) => {
        child.exit(1);
        return new Promise(() => {});
      },
    });
    const error = await rejection(
      session(MODULE, { ...quiet, maxRetries: 2 }),
      WorkerStartError,
    );
    assert.equal(error.failure, "retries");
    assert.equal(rt.children.length, 3);
  });

  test("session() a setup call that throws fails the start with the remote error", async () => {
    using _rt = runtime();
    const error = await rejection(
      session(MODULE, { ...quiet, setup: [["fail", "no database"]] }),
      WorkerStartError,
    );
    assert.equal(error.failure, "setup");
    assert.match(error.message, /no database/);
  });

  test("session() a start that passes startTimeoutMs is a WorkerTimeoutError", async () => {
    using _rt = runtime([], { load: () => new Promise(() => {}) });
    const error = await rejection(
      session(MODULE, { ...quiet, startTimeoutMs: 30 }),
      WorkerTimeoutError,
    );
    assert.equal(error.phase, "start");
    assert.equal(error.timeoutMs, 30);
  });
});
