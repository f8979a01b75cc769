// Bad API input: invalid options, module arguments, call options, ops and
// arguments are refused with TypeError or RangeError naming the option and
// the value received, before any process starts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  oneShot,
  pool,
  RemoteError,
  session,
  type WorkerOptions,
  WorkerStartError,
} from "../../mod.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, liveChildren } from "../_helpers/processes.ts";
import { needsWorkers } from "../_helpers/tools.ts";

checkNoLeaks();

const worker = new URL(
  "../fixtures/reliability/chaos_worker.ts",
  import.meta.url,
);

type Kind = typeof TypeError | typeof RangeError;

/** [options, error class, option name as the message names it, value as the message shows it] */
type Case = [Record<string, unknown>, Kind, string, string];

const COMMON: Case[] = [
  [{ callTimeoutMs: -1 }, RangeError, "callTimeoutMs", "-1"],
  [{ callTimeoutMs: Number.NaN }, RangeError, "callTimeoutMs", "NaN"],
  [{ callTimeoutMs: Infinity }, RangeError, "callTimeoutMs", "Infinity"],
  [{ callTimeoutMs: "5" }, TypeError, "callTimeoutMs", '"5"'],
  [{ callTimeoutMs: null }, TypeError, "callTimeoutMs", "null"],
  [{ startTimeoutMs: -5 }, RangeError, "startTimeoutMs", "-5"],
  [{ startTimeoutMs: Number.NaN }, RangeError, "startTimeoutMs", "NaN"],
  [{ maxRetries: -1 }, RangeError, "maxRetries", "-1"],
  [{ maxRetries: 1.5 }, RangeError, "maxRetries", "1.5"],
  [{ maxRetries: "2" }, TypeError, "maxRetries", '"2"'],
  [{ cancelGraceMs: -1 }, RangeError, "cancelGraceMs", "-1"],
  [{ closeGraceMs: 0 }, RangeError, "closeGraceMs", "0"],
  [{ closeGraceMs: -1 }, RangeError, "closeGraceMs", "-1"],
  [{ maxFrameBytes: 100 }, RangeError, "maxFrameBytes", "100"],
  [{ maxFrameBytes: 0 }, RangeError, "maxFrameBytes", "0"],
  [{ maxFrameBytes: "big" }, TypeError, "maxFrameBytes", '"big"'],
  [{ runtime: "node" }, RangeError, "runtime", '"node"'],
  [{ runtime: 5 }, TypeError, "runtime", "5"],
  [{ sandbox: "maybe" }, RangeError, "sandbox", '"maybe"'],
  [{ env: { A: 1 } }, TypeError, "env.A", "1"],
  [{ env: "x" }, TypeError, "env", '"x"'],
  [{ inheritEnv: "PATH" }, TypeError, "inheritEnv", '"PATH"'],
  [{ inheritEnv: [1] }, TypeError, "inheritEnv[0]", "1"],
  [{ cwd: 5 }, TypeError, "cwd", "5"],
  [{ cwd: "/does/not/exist" }, TypeError, "cwd", '"/does/not/exist"'],
  [{ setup: "x" }, TypeError, "setup", '"x"'],
  [{ setup: [[1]] }, TypeError, "setup[0]", "an array"],
  [{ idempotent: "peek" }, TypeError, "idempotent", '"peek"'],
  [{ idempotent: [1] }, TypeError, "idempotent[0]", "1"],
  [{ onStderr: "x" }, TypeError, "onStderr", '"x"'],
  [{ command: [] }, RangeError, "command", "an empty list"],
  [{ command: "deno" }, TypeError, "command", '"deno"'],
  [{ launcher: "ssh" }, TypeError, "launcher", '"ssh"'],
  [{ permissions: "none" }, RangeError, "permissions", '"none"'],
  [{ permissions: { read: 5 } }, TypeError, "permissions.read", "5"],
  [{ permissions: { bogus: true } }, TypeError, "permissions.bogus", "read"],
];

const POOL: Case[] = [
  [{ max: 0 }, RangeError, "max", "0"],
  [{ max: -1 }, RangeError, "max", "-1"],
  [{ max: 1.5 }, RangeError, "max", "1.5"],
  [{ max: Number.NaN }, RangeError, "max", "NaN"],
  [{ max: "2" }, TypeError, "max", '"2"'],
  [{ min: -1 }, RangeError, "min", "-1"],
  [{ max: 2, min: 3 }, RangeError, "min", "3"],
  [{ prewarm: -1 }, RangeError, "prewarm", "-1"],
  [{ max: 2, prewarm: 3 }, RangeError, "prewarm", "3"],
  [{ prewarm: "yes" }, TypeError, "prewarm", '"yes"'],
  [{ idleTimeoutMs: -1 }, RangeError, "idleTimeoutMs", "-1"],
  [{ idleTimeoutMs: Number.NaN }, RangeError, "idleTimeoutMs", "NaN"],
  [{ maxTasksPerWorker: -1 }, RangeError, "maxTasksPerWorker", "-1"],
  [{ maxTasksPerWorker: 0.5 }, RangeError, "maxTasksPerWorker", "0.5"],
  [{ maxRssBytes: -1 }, RangeError, "maxRssBytes", "-1"],
  [{ maxQueue: -1 }, RangeError, "maxQueue", "-1"],
  [{ maxQueue: Number.NaN }, RangeError, "maxQueue", "NaN"],
  [{ concurrency: 0 }, RangeError, "concurrency", "0"],
  [{ concurrency: "2" }, TypeError, "concurrency", '"2"'],
  [{ watch: 5 }, TypeError, "watch", "5"],
  [{ scope: 5 }, TypeError, "scope", "5"],
];

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function checkError(error: unknown, [options, kind, name, value]: Case): void {
  const label = `${JSON.stringify(options)}: ${String(error)}`;
  assert.ok(error instanceof kind, label);
  assert.equal(error.constructor, kind, label);
  assert.match(error.message, new RegExp(`"${escape(name)}"`), label);
  assert.match(error.message, new RegExp(escape(value)), label);
}

async function refusal(run: () => unknown): Promise<unknown> {
  try {
    await run();
  } catch (error: unknown) {
    return error;
  }
  assert.fail("expected a refusal");
}

describe("bad input", needsWorkers(), () => {
  test("session(), pool() and oneShot() refuse each invalid option with TypeError or RangeError naming it and its value, before any process starts", async () => {
    const before = liveChildren().length;
    for (const item of COMMON) {
      const options = item[0] as WorkerOptions;
      checkError(await refusal(() => session(worker, options)), item);
      checkError(await refusal(() => pool(worker, options)), item);
      checkError(await refusal(() => oneShot(worker, options)), item);
      assert.equal(liveChildren().length, before, JSON.stringify(options));
    }
    for (const item of POOL) {
      checkError(await refusal(() => pool(worker, item[0])), item);
    }
    assert.equal(liveChildren().length, before);
  });

  test("session(), pool() and oneShot() refuse options that are not an object, and a module that is not a file", async () => {
    const before = liveChildren().length;
    for (const options of [5, "fast", null]) {
      for (const run of [session, pool, oneShot]) {
        const error = await refusal(() =>
          (run as (m: URL, o: unknown) => unknown)(worker, options)
        );
        assert.ok(error instanceof TypeError, String(error));
        assert.match(error.message, /Invalid options/);
      }
    }
    for (const module of [5, "", undefined]) {
      const error = await refusal(() => pool(module as unknown as string));
      assert.ok(error instanceof TypeError, String(error));
      assert.match(error.message, /Invalid worker module.*received/);
    }
    const missing = await refusal(() => session("./no/such/worker.ts"));
    assert.ok(missing instanceof WorkerStartError, String(missing));
    assert.match(missing.message, /no\/such\/worker\.ts" does not exist/);
    assert.equal(liveChildren().length, before);
  });

  test("pool() and oneShot() refuse an argument that cannot cross, naming where it sits, before any process starts", async () => {
    const before = liveChildren().length;
    await using p = pool(worker, captureLog());
    const fresh = oneShot(worker, captureLog());
    const circular: Record<string, unknown> = {};
    circular.self = circular;
    class Point {
      x = 1;
    }
    const cases: [unknown[], RegExp][] = [
      [[1, { onDone: () => 1 }], /args\[1\]\.onDone/],
      [[Symbol("s")], /args\[0\]/],
      [[new WeakMap()], /args\[0\]/],
      [[[new Point()]], /args\[0\]\[0\]/],
      [[Promise.resolve(1)], /args\[0\]/],
      [[circular], /args\[0\]\.self/],
    ];
    for (const [args, where] of cases) {
      for (const run of [p, fresh]) {
        const error = await refusal(() => run.call("peek", args));
        assert.ok(error instanceof TypeError, String(error));
        assert.match(error.message, where);
      }
    }
    assert.equal(liveChildren().length, before, "nothing was spawned");
    assert.equal(p.stats().workers + p.stats().starting, 0);
  });

  test("session() refuses bad call options, ops and arguments with TypeError or RangeError and stays usable", async () => {
    await using s = await session(worker, captureLog());
    const calls: [() => Promise<unknown>, Kind, RegExp][] = [
      [
        () => s.call("whoami", [], { timeoutMs: -1 }),
        RangeError,
        /"timeoutMs".*-1/,
      ],
      [
        () => s.call("whoami", [], { timeoutMs: Number.NaN }),
        RangeError,
        /"timeoutMs".*NaN/,
      ],
      [
        () =>
          s.call("whoami", [], { signal: "stop" as unknown as AbortSignal }),
        TypeError,
        /"signal".*"stop"/,
      ],
      [
        () => s.call("whoami", [], 5 as unknown as { timeoutMs: number }),
        TypeError,
        /call options.*5/,
      ],
      [() => s.call("whoami", 5 as unknown as unknown[]), TypeError, /args/],
      [() => s.call(5 as unknown as string, []), TypeError, /op.*5/],
      [() => s.call("", []), TypeError, /op/],
      [() => s.call("peek", [() => 1]), TypeError, /args\[0\]/],
    ];
    for (const [run, kind, pattern] of calls) {
      const error = await refusal(run);
      assert.ok(error instanceof kind, String(error));
      assert.match((error as Error).message, pattern);
    }
    assert.equal(typeof await s.call("whoami", []), "number");
  });

  test("session(), pool() and oneShot() answer an unknown op with a TypeError from the worker listing its ops", async () => {
    await using s = await session(worker, captureLog());
    await using p = pool(worker, captureLog());
    const fresh = oneShot(worker, captureLog());
    for (const run of [s, p, fresh]) {
      const error = await refusal(() => run.call("nope", []));
      assert.ok(error instanceof RemoteError, String(error));
      assert.equal(error.name, "TypeError");
      assert.equal(error.op, "nope");
      assert.match(error.message, /"nope".*"read".*"write"/);
    }
  });
});
