// session() with real worker processes: what needs processes (values and
// errors through real pipes, crashes with stderr, blocked writes, grace kills,
// close, start failures of real modules, environment, cwd, output, runtimes).
// The scheduling cases that need none run in memory:
// session_scheduling_test.ts.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import {
  AirlockError,
  type OneShotOptions,
  type PoolOptions,
  RemoteError,
  type Session,
  session,
  SessionClosedError,
  type SessionOptions,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../../mod.ts";
import type behaviour from "../fixtures/behaviour_worker.ts";
import type sqlite from "../fixtures/sqlite_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive, liveChildren } from "../_helpers/processes.ts";
import { OTHER_RUNTIME } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { until, within } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("behaviour_worker.ts");

function scratch(): string {
  return mkdtempSync(join(tmpdir(), "airlock-session-"));
}

function lines(path: string): string[] {
  try {
    return readFileSync(path, "utf8").split("\n").filter(Boolean);
  } catch {
    return [];
  }
}

describe("session() options types", () => {
  // deno test type-checks this file: each @ts-expect-error must be an error.
  test("setup is typed from the worker's definition: wrong ops and arguments do not type-check", () => {
    type Behaviour = typeof behaviour;
    const ok: SessionOptions<Behaviour>["setup"] = [
      ["add", 1, 2],
      ["echo", { any: "value" }],
      ["increment"],
    ];
    const bad: SessionOptions<Behaviour>["setup"][] = [
      // @ts-expect-error: no op of that name
      [["nope"]],
      // @ts-expect-error: add takes numbers
      [["add", "1", 2]],
      // @ts-expect-error: the arguments follow the op, not as one array
      [["add", [1, 2]]],
      // @ts-expect-error: add takes two arguments
      [["add", 1]],
    ];
    const pooled: PoolOptions<Behaviour> = {
      // @ts-expect-error: pools check setup too
      setup: [["delay", "1", "x"]],
    };
    const fresh: OneShotOptions<Behaviour> = {
      // @ts-expect-error: so does oneShot
      setup: [["whoami", 1]],
    };
    // The factories check it (never called here: no process starts).
    const typedCalls = [
      // @ts-expect-error: session<typeof worker> checks setup
      () => session<Behaviour>(worker, { setup: [["add", 1, "2"]] }),
      // Without the worker's type nothing is inferred from setup: any op goes.
      () => session(worker, { setup: [["anything", 1, "x"]] }),
    ];
    assert.equal(typedCalls.length, 2);
    // Without the worker's type, any op and arguments are accepted.
    const loose: SessionOptions["setup"] = [["open", "./data"], ["x", 1, 2]];
    assert.equal(ok?.length, 3);
    assert.equal(bad.length, 4);
    assert.ok(pooled && fresh && loose);
  });
});

describe("session() calls", needsWorkers(), () => {
  // The cases after the first (which reads a fresh worker's stats) need no
  // fresh process: one session serves those of them on the typed proxy.
  let shared: Session<typeof behaviour> | undefined;
  before(async () => {
    shared = await session<typeof behaviour>(worker, captureLog());
  });
  after(async () => {
    await shared?.close();
  });
  const sharedSession = (): Session<typeof behaviour> => {
    assert.ok(shared, "the shared session started");
    return shared;
  };

  test("session() resolves ready with a pid and serves typed calls", async () => {
    await using s = await session<typeof behaviour>(worker, captureLog());
    assert.equal(typeof s.pid, "number");
    assert.equal(await s.add(2, 3), 5);
    assert.equal(await s.call("add", [4, 5]), 9);
    assert.notEqual(await s.whoami(), undefined);
    const stats = s.stats();
    assert.equal(stats.pid, s.pid);
    assert.equal(stats.calls, 3);
    assert.equal(stats.completed, 3);
    assert.equal(stats.restarts, 0);
    assert.ok((stats.rssBytes ?? 0) > 1024 * 1024, "rssBytes from the OS");
    assert.ok(stats.uptimeMs >= 0);
  });

  test("session() carries rich values both ways", async () => {
    const s = sharedSession();
    const value = {
      date: new Date(1_700_000_000_123),
      map: new Map<unknown, unknown>([[1, "one"], ["k", [1n]]]),
      set: new Set(["a", "b"]),
      big: -(2n ** 70n),
      nan: Number.NaN,
      negZero: -0,
      inf: -Infinity,
      undef: undefined,
      re: /x+y/gi,
      url: new URL("https://example.com/a?b=c"),
      bytes: new Uint8Array([1, 2, 3]),
      floats: new Float64Array([1.5, -2.25]),
      big64: new BigInt64Array([-5n]),
      buffer: new Uint8Array([9, 8]).buffer,
      nested: [[1, [2, [3]]], { deep: null }],
    };
    const back = await s.echo(value) as typeof value;
    assert.deepEqual(back, value);
    assert.ok(Object.is(back.negZero, -0));
  });

  test("session() rejects a RemoteError keeping name, message, code, properties, cause and stack", async () => {
    const s = sharedSession();
    const error = await s.throwCustom().then(() => undefined, (e) => e);
    assert.ok(error instanceof RemoteError);
    assert.ok(error instanceof AirlockError);
    assert.equal(error.name, "CustomError");
    assert.equal(error.message, "custom failure");
    assert.equal(error.code, "E_CUSTOM");
    assert.deepEqual(error.detail, { table: "t1" });
    assert.equal(error.op, "throwCustom");
    assert.equal(error.pid, s.pid);
    assert.match(error.remoteStack ?? "", /throwCustom|behaviour_worker/);
    assert.ok(error.cause instanceof Error);
    assert.equal((error.cause as Error).name, "TypeError");
    assert.equal((error.cause as Error).message, "root cause");
    const plain = await s.throwString().then(() => undefined, (e) => e);
    assert.ok(plain instanceof RemoteError);
    assert.equal(plain.message, "plain string");
  });

  test("session() answers an unknown op with an error listing the ops served", async () => {
    await using s = await session(worker, captureLog());
    const error = await s.call("nope", []).then(() => undefined, (e) => e);
    assert.ok(error instanceof RemoteError);
    assert.equal(error.name, "TypeError");
    assert.match(error.message, /"nope".*"echo"/);
  });

  test("session() refuses an argument that cannot cross, naming where it sits, and stays usable", async () => {
    const s = sharedSession();
    const error = await s.call("echo", [{ onDone: () => 1 }]).then(
      () => undefined,
      (e) => e,
    );
    assert.ok(error instanceof TypeError);
    assert.match(
      error.message,
      /args\[0\]\.onDone: a function cannot cross to the worker$/,
    );
    const back = await s.returnFunction().then(() => undefined, (e) => e);
    assert.ok(back instanceof RemoteError);
    assert.equal(back.name, "TypeError");
    assert.match(
      back.message,
      /value\.fn: a function cannot cross from the worker to the parent/,
    );
    assert.equal(await s.add(1, 1), 2);
  });
});

describe("session() crashes", needsWorkers(), () => {
  test("session() a crash with 8 calls pending fails all 8, then the next call runs on a new worker", async () => {
    const log = captureLog();
    await using s = await session<typeof behaviour>(worker, log);
    const before = s.pid;
    const pending = Array.from({ length: 8 }, () => s.call("hang", []));
    await s.stderr("last words");
    void s.killSelf("SIGKILL").catch(() => {});
    const results = await within(
      Promise.allSettled(pending),
      30_000,
      "pending calls after a crash",
    );
    for (const result of results) {
      assert.equal(result.status, "rejected");
      const error = (result as PromiseRejectedResult).reason;
      assert.ok(error instanceof WorkerCrashedError, String(error));
      assert.equal(error.signal, "SIGKILL");
      assert.equal(error.exitCode, null);
      assert.equal(error.pid, before);
      assert.equal(error.op, "hang");
      assert.match(error.hint ?? "", /killed from outside|out-of-memory/);
      assert.match(error.stderrTail, /last words/);
    }
    assert.equal(await s.add(1, 2), 3);
    assert.notEqual(s.pid, before);
    assert.equal(s.stats().crashed, 1);
    assert.equal(s.stats().restarts, 1);
  });

  test("session() reports the exit code of a worker that exits", async () => {
    await using s = await session<typeof behaviour>(worker, captureLog());
    const error = await s.exitWith(3).then(() => undefined, (e) => e);
    assert.ok(error instanceof WorkerCrashedError);
    assert.equal(error.exitCode, 3);
    assert.equal(error.signal, null);
  });

  test("session() replays setup on every start and retries idempotent calls lost in a crash", async () => {
    const dir = scratch();
    try {
      await using s = await session<typeof behaviour>(worker, {
        ...captureLog(),
        setup: [["increment"], ["increment"]],
        idempotent: ["delay"],
        permissions: { write: [dir] },
      });
      assert.equal(await s.increment(), 3, "setup ran twice before");
      const log = join(dir, "append.log");
      const idempotent = s.delay(300, "survived");
      const nonIdempotent = s.appendThenWait(log, "once", 60_000).then(
        () => undefined,
        (e) => e,
      );
      await until(() => lines(log).length === 1, 10_000, "append ran");
      await s.killSelfLater(20).catch(() => {});
      assert.equal(
        await within(idempotent, 30_000, "retried call"),
        "survived",
      );
      const lost = await within(nonIdempotent, 30_000, "lost call");
      assert.ok(lost instanceof WorkerCrashedError);
      assert.equal(lost.op, "appendThenWait");
      assert.deepEqual(lines(log), ["once"], "the write ran exactly once");
      assert.equal(await s.increment(), 3, "setup replayed on the new worker");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("session() lost calls", needsWorkers(), () => {
  test("session() a retried call that keeps crashing its worker fails with its attempts and their pids", async () => {
    await using s = await session<typeof behaviour>(worker, {
      ...captureLog(),
      idempotent: ["killSelf"],
      maxRetries: 2,
    });
    const error = await s.killSelf("SIGKILL").then(() => undefined, (e) => e);
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.op, "killSelf");
    assert.equal(error.attempts, 3);
    assert.equal(error.pids.length, 3);
    assert.equal(new Set(error.pids).size, 3, "each attempt on a new worker");
    assert.equal(error.pid, error.pids[2]);
    assert.match(
      error.message,
      new RegExp(`after 3 attempts \\(on pids ${error.pids.join(", ")}\\)`),
    );
    const once = await s.exitWith(3).then(() => undefined, (e) => e);
    assert.ok(once instanceof WorkerCrashedError);
    assert.equal(once.attempts, 1, "not idempotent: one attempt");
    assert.deepEqual(once.pids, [once.pid]);
    assert.doesNotMatch(once.message, /attempts/);
  });
});

describe("session() timeouts and cancellation", needsWorkers(), () => {
  test("session() a call whose write blocks because the worker stopped reading still times out", async () => {
    await using s = await session<typeof behaviour>(worker, {
      ...captureLog(),
      cancelGraceMs: 100,
    });
    const wedged = s.call("busy", [20_000], { timeoutMs: 60_000 }).catch((
      e,
    ) => e);
    await until(() => s.stats().inFlight === 1, 10_000, "busy call written");
    // 8 MiB cannot fit in the pipe while the worker spins in synchronous code.
    const big = new Uint8Array(8 * 1024 * 1024);
    const error = await within(
      s.call("echo", [big], { timeoutMs: 300 }).catch((e) => e),
      10_000,
      "the blocked call",
    );
    assert.ok(error instanceof WorkerTimeoutError, String(error));
    assert.equal(error.op, "echo");
    s.call("hang", [], { timeoutMs: 100 }).catch(() => {});
    assert.ok(
      (await within(wedged, 10_000, "the wedged call")) instanceof
        WorkerCrashedError,
      "two timeouts in a row replace the wedged worker",
    );
  });

  test("session() a cancelled call that does not stop is killed after the grace period", async () => {
    await using s = await session<typeof behaviour>(worker, {
      ...captureLog(),
      cancelGraceMs: 100,
    });
    const first = s.pid!;
    const controller = new AbortController();
    const stuck = s.call("hang", [], { signal: controller.signal });
    const bystander = s.call("hang", []);
    controller.abort();
    const reason = await stuck.then(() => undefined, (e) => e);
    assert.equal((reason as Error).name, "AbortError");
    const lost = await within(bystander, 30_000, "bystander").then(
      () => undefined,
      (e) => e,
    );
    assert.ok(lost instanceof WorkerCrashedError);
    assert.match(lost.reason ?? "", /cancelled call "hang".*100 ms/);
    await until(() => !isAlive(first), 10_000, "old worker gone");
    assert.equal(await s.add(1, 1), 2);
    assert.notEqual(s.pid, first);
  });
});

describe("session() restart and close", needsWorkers(), () => {
  test("session() close() drains, leaves no process, and refuses later calls", async () => {
    const s = await session<typeof behaviour>(worker, captureLog());
    const pid = s.pid!;
    const inFlight = s.delay(100, "drained");
    const closing = s.close();
    assert.equal(await inFlight, "drained");
    await closing;
    assert.equal(isAlive(pid), false);
    await s.close();
    const error = await s.add(1, 1).then(() => undefined, (e) => e);
    assert.ok(error instanceof SessionClosedError);
    assert.equal(error.op, "add");
    const restart = await s.restart().then(() => undefined, (e) => e);
    assert.ok(restart instanceof SessionClosedError);
  });

  test("session() a call that fails with nobody awaiting it is no unhandled rejection", async () => {
    // The mode counts a settled call without a promise reaction of its own;
    // a rejected call is still marked handled (_call.ts).
    const unhandled: unknown[] = [];
    const onUnhandled = (reason: unknown): void => {
      unhandled.push(reason);
    };
    process.on("unhandledRejection", onUnhandled);
    try {
      const s = await session<typeof behaviour>(worker, captureLog());
      s.throwCustom(); // the handle dropped
      s.call("throwCustom", []); // the promise dropped
      s.hang(); // ended by close({ force })
      await until(() => s.stats().failed === 2, 30_000, "two failures");
      await s.close({ force: true });
      assert.equal(s.stats().failed, 3);
      // Rejections nobody handled are reported once the event loop turns.
      for (let turn = 0; turn < 3; turn++) {
        await new Promise((resolve) => setTimeout(resolve, 0));
      }
      assert.deepEqual(unhandled, []);
    } finally {
      process.off("unhandledRejection", onUnhandled);
    }
  });

  test("session() close({ force: true }) ends running calls, kills the worker and resolves once it is gone", async () => {
    const s = await session<typeof behaviour>(worker, captureLog());
    const pid = s.pid!;
    const running = s.delay(60_000, "running");
    await until(() => s.stats().inFlight === 1, 30_000, "running");
    const started = Date.now();
    await s.close({ force: true });
    assert.ok(
      Date.now() - started < 30_000,
      "close() did not wait for the call",
    );
    assert.equal(isAlive(pid), false);
    const error = await running.then(() => undefined, (e) => e);
    assert.ok(error instanceof SessionClosedError, String(error));
    assert.equal(error.kind, "session");
    assert.equal(error.op, "delay");
    assert.equal(s.stats().crashed, 0, "a forced kill is not a crash");
    assert.equal(s.stats().failed, 1);
  });

  test("session() closeTimeoutMs bounds a plain close(): finished calls keep their value, the rest end", async () => {
    const s = await session<typeof behaviour>(worker, {
      ...captureLog(),
      closeTimeoutMs: 200,
    });
    const pid = s.pid!;
    const quick = s.delay(1, "quick");
    const running = s.delay(60_000, "running");
    await s.close();
    assert.equal(await quick, "quick");
    assert.ok((await running.catch((e) => e)) instanceof SessionClosedError);
    assert.equal(isAlive(pid), false);
  });

  test("session() close({ timeoutMs }) overrides closeTimeoutMs, and refuses a bad value", async () => {
    const s = await session<typeof behaviour>(worker, captureLog());
    await assert.rejects(s.close({ timeoutMs: -1 }), RangeError);
    await assert.rejects(
      s.close({ forse: true } as unknown as { force: boolean }),
      TypeError,
    );
    const running = s.delay(60_000, "running");
    await s.close({ timeoutMs: 100 });
    assert.ok((await running.catch((e) => e)) instanceof SessionClosedError);
  });

  test("session() close() frees a SQLite lock for a new session at once", async () => {
    const dir = scratch();
    try {
      const path = join(dir, "app.db");
      const options = {
        ...captureLog(),
        permissions: { read: [dir], write: [dir] },
        setup: [["open", path]] as const,
        callTimeoutMs: 10_000,
      };
      const first = await session<typeof sqlite>(
        fixture("sqlite_worker.ts"),
        options,
      );
      await first.exec("create table t(x)");
      assert.equal(await first.lock(), "locked");
      await first.close();
      await using second = await session<typeof sqlite>(
        fixture("sqlite_worker.ts"),
        options,
      );
      await second.exec("insert into t values (1)");
      assert.deepEqual(await second.all("select x from t"), [{ x: 1 }]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("session() start failures", needsWorkers(), () => {
  test("session() reports a module that throws during import with its message and stack", async () => {
    const started = Date.now();
    const error = await session(fixture("import_throws_worker.ts"), {
      ...captureLog(),
      startTimeoutMs: 60_000,
    }).then(() => undefined, (e) => e);
    assert.ok(error instanceof WorkerStartError, String(error));
    assert.equal(error.failure, "import");
    assert.equal(error.remoteMessage, "cannot load native binding");
    assert.match(error.remoteStack ?? "", /import_throws_worker/);
    assert.match(error.message, /threw during import/);
    assert.ok(
      Date.now() - started < 30_000,
      "fails at once, not at the timeout",
    );
  });

  test("session() reports a module without a worker definition", async () => {
    const error = await session(fixture("not_a_worker.ts"), captureLog()).then(
      () => undefined,
      (e) => e,
    );
    assert.ok(error instanceof WorkerStartError);
    assert.equal(error.failure, "definition");
    assert.match(error.message, /defineWorker/);
  });

  test("session() reports a worker that exits before ready with code and stderr tail, without a respawn storm", async () => {
    const error = await session(fixture("exit_on_import_worker.ts"), {
      ...captureLog(),
      maxRetries: 1,
    }).then(() => undefined, (e) => e);
    assert.ok(error instanceof WorkerStartError, String(error));
    assert.equal(error.failure, "retries");
    const last = error.cause as WorkerStartError;
    assert.ok(last instanceof WorkerStartError);
    assert.equal(last.failure, "exited");
    assert.equal(last.exitCode, 3);
    assert.match(last.stderrTail, /about to exit during import/);
  });

  test("session() refuses invalid options before anything spawns", async () => {
    const before = liveChildren().length;
    const cases: [Record<string, unknown>, typeof TypeError][] = [
      [{ callTimeoutMs: -1 }, RangeError],
      [{ callTimeoutMs: Number.NaN }, RangeError],
      [{ startTimeoutMs: Infinity }, RangeError],
      [{ callTimeoutMs: "5" }, TypeError],
      [{ runtime: "node" }, RangeError],
      [{ maxRetries: 1.5 }, RangeError],
      [{ env: { A: 1 } }, TypeError],
      [{ setup: [[1]] }, TypeError],
      [{ sandbox: "maybe" }, RangeError],
      [{ callTimeOutMs: 5 }, TypeError],
      [{ max: 2 }, TypeError],
    ];
    for (const [options, kind] of cases) {
      const error = await session(worker, options).then(
        () => undefined,
        (e) => e,
      );
      assert.ok(error instanceof kind, `${JSON.stringify(options)}: ${error}`);
      const name = Object.keys(options)[0]!;
      assert.match(error.message, new RegExp(name));
    }
    const typo = await session(worker, { callTimeOutMs: 5 } as never).catch((
      e,
    ) => e);
    assert.match(typo.message, /did you mean "callTimeoutMs"/);
    const missing = await session("./does/not/exist.ts").then(
      () => undefined,
      (e) => e,
    );
    // A start that cannot succeed: an AirlockError, refused before a spawn.
    assert.ok(missing instanceof WorkerStartError, String(missing));
    assert.equal(missing.failure, "import");
    assert.match(missing.message, /does not exist/);
    assert.equal(liveChildren().length, before);
  });
});

describe("session() environment and output", needsWorkers(), () => {
  test("session() does not inherit the parent's environment; env and inheritEnv set it", async () => {
    await using s = await session<typeof behaviour>(worker, {
      ...captureLog(),
      env: { GREETING: "hello" },
      inheritEnv: ["PATH"],
      permissions: { env: true },
    });
    assert.equal(await s.env("GREETING"), "hello");
    assert.equal(await s.env("PATH"), process.env.PATH);
    assert.equal(await s.env("HOME"), undefined);
  });

  test("session() runs in the cwd option", async () => {
    const dir = scratch();
    try {
      await using s = await session<typeof behaviour>(worker, {
        ...captureLog(),
        cwd: dir,
        permissions: { sys: true, read: [dir] },
      });
      assert.equal(await s.cwd(), dir);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("session() hands stderr lines and stray stdout to onStderr without breaking the stream", async () => {
    const log = captureLog();
    await using s = await session<typeof behaviour>(worker, log);
    assert.equal(await s.consoleLog("via console.log"), "logged");
    assert.equal(await s.printStdout("raw stdout bytes\n"), "printed");
    assert.equal(await s.add(1, 2), 3);
    await until(
      () =>
        log.lines.includes("via console.log") &&
        log.lines.includes("raw stdout bytes"),
      10_000,
      "both lines logged",
    );
  });

  test(
    `session() runs a worker on the other runtime (${OTHER_RUNTIME})`,
    needsWorkers(OTHER_RUNTIME),
    async () => {
      await using s = await session<typeof behaviour>(worker, {
        ...captureLog(),
        runtime: OTHER_RUNTIME,
      });
      assert.equal(await s.add(20, 22), 42);
    },
  );
});
