// The diagnostics channels (issue 18 item 1): worker start, exit and
// recycle, call retries and timeouts, the tracing channel `airlock:call`
// around every call, and the W3C trace context a subscriber sets there
// reaching the worker's handler (item 2). Real workers: the events are
// about processes.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import dc from "node:diagnostics_channel";
import {
  oneShot,
  pool,
  session,
  SessionClosedError,
  WorkerCrashedError,
  WorkerTimeoutError,
} from "../../mod.ts";
import {
  type CallRetryEvent,
  type CallTimeoutEvent,
  type CallTraceContext,
  DIAGNOSTICS_CHANNELS,
  type WorkerExitEvent,
  type WorkerRecycleEvent,
  type WorkerStartEvent,
} from "../../diagnostics.ts";
import type traced from "../fixtures/trace_worker.ts";
import {
  findPython,
  PYTHON_ENTRY,
  pythonFixture,
} from "../conformance/_python.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needs, needsWorkers } from "../_helpers/tools.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("trace_worker.ts");
const MODULE = "trace_worker.ts";

/** A recording of one channel's messages for this file's worker module. */
function record<T extends { module: string }>(
  name: string,
): { events: T[]; [Symbol.dispose](): void } {
  const events: T[] = [];
  const listener = (message: unknown) => {
    const event = message as T;
    if (event.module === MODULE) events.push(event);
  };
  // Held, as docs/observability.md advises: Bun drops a channel nothing
  // refers to, and its subscribers with it (in a process of its own, before
  // airlock first looked its channels up, this one lost its events).
  const channel = dc.channel(name);
  channel.subscribe(listener);
  return {
    events,
    [Symbol.dispose]: () => void channel.unsubscribe(listener),
  };
}

type TraceEvent = {
  kind: "start" | "end" | "asyncStart" | "asyncEnd" | "error";
  context: CallTraceContext;
  /** The fields as they were when the event was published. */
  pid: number | undefined;
  attempt: number;
};

/** A recording of the tracing channel, with an optional `start` hook. */
function recordCalls(
  onStart?: (context: CallTraceContext) => void,
): {
  events: TraceEvent[];
  kinds(op: string): string[];
  [Symbol.dispose](): void;
} {
  const events: TraceEvent[] = [];
  const channel = dc.tracingChannel<object, CallTraceContext>(
    DIAGNOSTICS_CHANNELS.call,
  );
  const on = (kind: TraceEvent["kind"]) => (message: unknown) => {
    const context = message as CallTraceContext;
    if (context.module !== MODULE) return;
    if (kind === "start") onStart?.(context);
    events.push({ kind, context, pid: context.pid, attempt: context.attempt });
  };
  const handlers = {
    start: on("start"),
    end: on("end"),
    asyncStart: on("asyncStart"),
    asyncEnd: on("asyncEnd"),
    error: on("error"),
  };
  channel.subscribe(handlers);
  return {
    events,
    kinds: (op) =>
      events.filter((event) => event.context.op === op).map((event) =>
        event.kind
      ),
    [Symbol.dispose]: () => void channel.unsubscribe(handlers),
  };
}

const TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

describe("diagnostics channels", needsWorkers(), () => {
  test("session(): start, traced calls and a requested exit are published", async () => {
    using starts = record<WorkerStartEvent>("airlock:worker:start");
    using exits = record<WorkerExitEvent>("airlock:worker:exit");
    using calls = recordCalls();
    const s = await session<typeof traced>(worker);
    const pid = s.pid;
    try {
      assert.equal(starts.events.length, 1);
      const start = starts.events[0]!;
      assert.equal(start.pid, pid);
      assert.equal(start.mode, "session");
      assert.equal(typeof start.startedAt, "number");
      assert.ok(start.startMs >= 0);
      assert.ok(Array.isArray(start.sandboxes));
      assert.deepEqual(start.sandboxes, s.stats().sandboxes);
      // A Bun worker always runs in the OS sandbox (Bun has no permission
      // model), and says which backends confine it.
      if (RUNTIME === "bun") assert.ok(start.sandboxes.length > 0);

      assert.equal(await s.call("echo", [7]), 7);
      assert.deepEqual(calls.kinds("echo"), [
        "start",
        "end",
        "asyncStart",
        "asyncEnd",
      ]);
      const done = calls.events.find((event) => event.kind === "asyncEnd")!;
      assert.equal(done.context.pid, pid);
      assert.equal(done.context.attempt, 1);
      assert.equal(done.context.mode, "session");
      assert.equal(done.context.result, 7);
      assert.ok(done.context.id > 0);

      const error = await rejection(s.call("fail", ["no"]), Error);
      assert.deepEqual(calls.kinds("fail"), [
        "start",
        "end",
        "error",
        "asyncStart",
        "asyncEnd",
      ]);
      const failed = calls.events.find((event) =>
        event.kind === "error" && event.context.op === "fail"
      )!;
      assert.equal(failed.context.error, error);
    } finally {
      await s.close();
    }
    assert.equal(exits.events.length, 1);
    const exit = exits.events[0]!;
    assert.equal(exit.pid, pid);
    assert.equal(exit.mode, "session");
    assert.equal(exit.requested, true);
    assert.equal(exit.signal === null || typeof exit.signal === "string", true);
    assert.ok(exit.uptimeMs >= 0);
  });

  test("airlock:call start subscriber's traceparent reaches the handler as this.traceContext", async () => {
    using _calls = recordCalls((context) => {
      if (context.op !== "traceContext") return;
      context.traceparent = TRACEPARENT;
      context.tracestate = "vendor=abc";
    });
    await using s = await session<typeof traced>(worker);
    assert.deepEqual(await s.call("traceContext", []), {
      traceparent: TRACEPARENT,
      tracestate: "vendor=abc",
    });
    await using p = pool<typeof traced>(worker, { max: 1 });
    assert.deepEqual(await p.traceContext(), {
      traceparent: TRACEPARENT,
      tracestate: "vendor=abc",
    });
    const fresh = oneShot<typeof traced>(worker);
    assert.deepEqual(await fresh.call("traceContext", []), {
      traceparent: TRACEPARENT,
      tracestate: "vendor=abc",
    });
  });

  test("a malformed traceparent is not carried; without a subscriber nothing is", async () => {
    await using s = await session<typeof traced>(worker);
    assert.equal(await s.call("traceContext", []), null);
    {
      using _calls = recordCalls((context) => {
        context.traceparent = "not a trace parent";
      });
      assert.equal(await s.call("traceContext", []), null);
    }
    assert.equal(await s.call("traceContext", []), null);
  });

  test("a crash publishes a retry, a crash recycle, an unrequested exit and a traced error", async () => {
    using retries = record<CallRetryEvent>("airlock:call:retry");
    using recycles = record<WorkerRecycleEvent>("airlock:worker:recycle");
    using exits = record<WorkerExitEvent>("airlock:worker:exit");
    using calls = recordCalls();
    await using s = await session<typeof traced>(worker, {
      idempotent: ["exitWith"],
      maxRetries: 1,
    });
    const first = s.pid!;
    const error = await rejection(s.call("exitWith", [3]), WorkerCrashedError);
    assert.equal(error.exitCode, 3);
    assert.equal(retries.events.length, 1);
    const retry = retries.events[0]!;
    assert.equal(retry.op, "exitWith");
    assert.equal(retry.pid, first);
    assert.equal(retry.attempt, 2);
    assert.equal(retry.exitCode, 3);
    assert.equal(retry.mode, "session");
    await until(() => exits.events.length >= 2, 30_000, "two exits");
    assert.deepEqual(exits.events.map((exit) => exit.requested), [
      false,
      false,
    ]);
    assert.deepEqual(exits.events.map((exit) => exit.exitCode), [3, 3]);
    assert.equal(exits.events[0]!.pid, first);
    assert.deepEqual(
      recycles.events.map((event) => [event.cause, event.mode]),
      [["crash", "session"], ["crash", "session"]],
    );
    assert.equal(recycles.events[0]!.pid, first);
    const failed = calls.events.find((event) => event.kind === "error")!;
    assert.equal(failed.context.error, error);
    assert.equal(failed.context.attempt, 2);
    assert.notEqual(failed.context.pid, first);
    assert.equal(failed.context.pid, error.pid);
  });

  test("a call past its deadline publishes airlock:call:timeout", async () => {
    using timeouts = record<CallTimeoutEvent>("airlock:call:timeout");
    await using s = await session<typeof traced>(worker, {
      cancelGraceMs: 100,
    });
    const pid = s.pid;
    await rejection(s.call("hang", [], { timeoutMs: 100 }), WorkerTimeoutError);
    assert.equal(timeouts.events.length, 1);
    const timeout = timeouts.events[0]!;
    assert.equal(timeout.op, "hang");
    assert.equal(timeout.pid, pid);
    assert.equal(timeout.timeoutMs, 100);
    assert.equal(timeout.mode, "session");
  });

  test("pool(): maxTasksPerWorker publishes a recycle with cause tasks", async () => {
    using recycles = record<WorkerRecycleEvent>("airlock:worker:recycle");
    using starts = record<WorkerStartEvent>("airlock:worker:start");
    await using p = pool<typeof traced>(worker, {
      max: 1,
      maxTasksPerWorker: 1,
    });
    assert.equal(await p.echo(1), 1);
    assert.equal(await p.echo(2), 2);
    await until(
      () => recycles.events.length >= 2,
      30_000,
      "two recycles",
    );
    assert.deepEqual(
      recycles.events.map((event) => [event.cause, event.mode]).slice(0, 2),
      [["tasks", "pool"], ["tasks", "pool"]],
    );
    assert.equal(recycles.events[0]!.pid, starts.events[0]!.pid);
    assert.ok(starts.events.every((event) => event.mode === "pool"));
  });

  test("oneShot(): start, exit and the traced call name mode oneShot", async () => {
    using starts = record<WorkerStartEvent>("airlock:worker:start");
    using exits = record<WorkerExitEvent>("airlock:worker:exit");
    using calls = recordCalls();
    const fresh = oneShot<typeof traced>(worker);
    assert.equal(await within(fresh.echo("x"), 60_000, "a one-shot call"), "x");
    assert.equal(starts.events.length, 1);
    assert.equal(starts.events[0]!.mode, "oneShot");
    await until(() => exits.events.length === 1, 30_000, "the exit");
    assert.equal(exits.events[0]!.requested, true);
    assert.equal(exits.events[0]!.pid, starts.events[0]!.pid);
    const done = calls.events.find((event) => event.kind === "asyncEnd")!;
    assert.equal(done.context.mode, "oneShot");
    assert.equal(done.context.pid, starts.events[0]!.pid);
    assert.equal(done.context.attempt, 1);
  });

  test("an iterated stream is traced with no result, an awaited one with its values", async () => {
    using calls = recordCalls();
    await using s = await session<typeof traced>(worker);
    const values: number[] = [];
    for await (const value of s.stream("count", [3])) values.push(value);
    assert.deepEqual(values, [0, 1, 2]);
    assert.deepEqual(await s.call("count", [2]), [0, 1]);
    const ends = calls.events.filter((event) => event.kind === "asyncEnd");
    assert.equal(ends.length, 2);
    assert.equal(ends[0]!.context.result, undefined);
    assert.deepEqual(ends[1]!.context.result, [0, 1]);
  });

  test("a call refused by a closed session is traced as error then end", async () => {
    using calls = recordCalls();
    const s = await session<typeof traced>(worker);
    await s.close();
    const error = await rejection(s.call("echo", [1]), SessionClosedError);
    assert.deepEqual(calls.kinds("echo"), ["start", "error", "end"]);
    assert.equal(calls.events[1]!.context.error, error);
    assert.equal(calls.events[1]!.context.pid, undefined);
  });
});

const python = findPython();

test("a Python worker accepts a traced call's trace context (and ignores it)", {
  skip: needs("python3").skip ?? python.skip,
}, async () => {
  const channel = dc.tracingChannel<object, CallTraceContext>(
    DIAGNOSTICS_CHANNELS.call,
  );
  const seen: CallTraceContext[] = [];
  const handlers = {
    start(message: unknown) {
      const context = message as CallTraceContext;
      if (context.module !== "conformance_worker.py") return;
      context.traceparent = TRACEPARENT;
      context.tracestate = "vendor=abc";
    },
    asyncEnd(message: unknown) {
      const context = message as CallTraceContext;
      if (context.module === "conformance_worker.py") seen.push(context);
    },
  };
  channel.subscribe(handlers);
  try {
    await using s = await session(pythonFixture("conformance_worker.py"), {
      command: [
        python.path ?? "python3",
        "-B",
        PYTHON_ENTRY,
        pythonFixture("conformance_worker.py"),
      ],
      permissions: "all",
    });
    assert.equal(await s.call("echo", ["traced"]), "traced");
    assert.equal(seen.length, 1);
    assert.equal(seen[0]!.result, "traced");
    assert.equal(seen[0]!.pid, s.pid);
  } finally {
    channel.unsubscribe(handlers);
  }
});
