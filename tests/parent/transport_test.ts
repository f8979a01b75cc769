// A launcher that is a programmatic transport (a `WorkerTransport`), for
// real: workers started by a bridge process over TCP on loopback
// (tests/_helpers/bridge.ts), with no local CLI and no local process per
// worker. What the interface carries (stdin, stdout, stderr, exit, a way to
// end it), that end-of-file ends the far worker, typed start failures that
// name the transport, what `limits` do, and a pool's health over two
// bridges, one lost and back. The argv-prefix form through ssh:
// launcher_test.ts and pool_ssh_hosts_test.ts.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  oneShot,
  PermissionError,
  pool,
  session,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
  type WorkerTransport,
} from "../../mod.ts";
import type { TransportProcess } from "../../types.ts";
import type { ConformanceWorker } from "../conformance/conformance.ts";
import {
  findPython,
  PYTHON_ENTRY,
  pythonFixture,
} from "../conformance/_python.ts";
import {
  type BridgeLog,
  bridgeTransport,
  startBridge,
} from "../_helpers/bridge.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { needs } from "../_helpers/tools.ts";
import { rejection, until, within } from "../_helpers/wait.ts";

checkNoLeaks();

const python = findPython();
const COMMAND = [
  python.path ?? "python3",
  "-B",
  PYTHON_ENTRY,
  pythonFixture("conformance_worker.py"),
];

function freshLog(): BridgeLog {
  return { pids: [], starts: 0 };
}

describe("launcher: a programmatic transport", needs("python3"), () => {
  test("session() through a transport carries stdin, stdout, stderr and the exit", async () => {
    const bridge = await startBridge();
    const log = freshLog();
    const lines: string[] = [];
    try {
      const s = await session<ConformanceWorker>(PYTHON_ENTRY, {
        launcher: bridgeTransport(bridge.port, log),
        command: COMMAND,
        onStderr: (line) => lines.push(line),
      });
      try {
        assert.equal(await s.add(2, 3), 5);
        assert.equal(s.pid, log.pids[0], "the far side's pid, from the hello");
        assert.equal(await s.whoami(), log.pids[0]);
        const big = new Uint8Array(1_000_000).map((_, i) => i % 251);
        assert.deepEqual(await s.echo(big), big, "1 MB each way");
        await s.stderr("a line on the far stderr");
        await until(
          () => lines.some((line) => line.includes("a line on the far stderr")),
          10_000,
          "the far worker's stderr line",
        );
        const exited = await rejection(s.exitWith(3), WorkerCrashedError);
        assert.equal(
          exited.exitCode,
          3,
          "the exit code, as the bridge reports it",
        );
        const killed = await rejection(s.crash(), WorkerCrashedError);
        assert.equal(killed.signal, "SIGKILL", "a death by signal, by name");
        assert.equal(await s.add(1, 1), 2, "the next call starts a new worker");
        assert.equal(log.starts, 3);
      } finally {
        await within(s.close(), 15_000, "close()");
      }
      for (const pid of log.pids) {
        await until(() => !isAlive(pid), 10_000, `far worker ${pid} to exit`);
      }
    } finally {
      await bridge.kill();
    }
  });

  test("a transport's end of stdin ends the far worker, and a dropped connection fails its calls", async () => {
    const bridge = await startBridge();
    const log = freshLog();
    try {
      const s = await session<ConformanceWorker>(PYTHON_ENTRY, {
        launcher: bridgeTransport(bridge.port, log),
        command: COMMAND,
        onStderr: () => {},
      });
      const first = s.pid ?? -1;
      // close(): stdin's end alone (the bridge never signals the worker).
      await within(s.close(), 15_000, "close()");
      await until(
        () => !isAlive(first),
        10_000,
        "the worker to exit at end-of-file",
      );

      await using again = await session<ConformanceWorker>(PYTHON_ENTRY, {
        launcher: bridgeTransport(bridge.port, log),
        command: COMMAND,
        onStderr: () => {},
        closeGraceMs: 100,
      });
      const second = again.pid ?? -1;
      const pending = Array.from(
        { length: 3 },
        () => again.hang().then(() => undefined, (error: unknown) => error),
      );
      assert.equal(await again.add(1, 1), 2, "the hanging calls are in flight");
      // The connection is lost (not airlock's doing): the bridge ends the
      // worker's stdin, and nothing signals it.
      log.drop?.();
      const failures = await within(Promise.all(pending), 15_000, "the calls");
      for (const failure of failures) {
        assert.ok(failure instanceof WorkerCrashedError, String(failure));
        assert.equal(failure.executed, "maybe");
        assert.equal(failure.signal, "SIGHUP", "the transport's report");
      }
      await until(
        () => !isAlive(second),
        10_000,
        "the worker to exit once its connection is gone",
      );
      // close({ force }): the transport's kill(), which drops the
      // connection the same way.
      assert.equal(await again.add(2, 2), 4, "a new worker, a new connection");
      const third = again.pid ?? -1;
      assert.notEqual(third, second);
      await within(again.close({ force: true }), 15_000, "close({ force })");
      await until(() => !isAlive(third), 10_000, "the third worker to exit");
    } finally {
      await bridge.kill();
    }
  });

  test("a transport that cannot start fails with WorkerStartError naming it", async () => {
    const bridge = await startBridge();
    const port = bridge.port;
    await bridge.kill();
    const log = freshLog();
    const refused = await rejection(
      session(PYTHON_ENTRY, {
        launcher: bridgeTransport(port, log),
        command: COMMAND,
        maxRetries: 2,
      }),
      WorkerStartError,
    );
    assert.equal(refused.failure, "retries");
    assert.match(
      refused.message,
      new RegExp(`launcher "bridge 127.0.0.1:${port}"`),
    );
    assert.match(refused.message, /ECONNREFUSED/);
    assert.equal(
      log.starts,
      3,
      "a transport's failure is retried (maxRetries)",
    );

    const once = await rejection(
      session(PYTHON_ENTRY, {
        launcher: bridgeTransport(port),
        command: COMMAND,
        maxRetries: 0,
      }),
      WorkerStartError,
    );
    assert.equal(once.failure, "spawn");

    const throwing: WorkerTransport = {
      name: "throws",
      start() {
        throw new Error("no credentials");
      },
    };
    const thrown = await rejection(
      session(PYTHON_ENTRY, {
        launcher: throwing,
        command: COMMAND,
        maxRetries: 0,
      }),
      WorkerStartError,
    );
    assert.equal(thrown.failure, "spawn");
    assert.match(thrown.message, /launcher "throws": no credentials/);

    const shapeless = {
      name: "shapeless",
      start: () => ({ stdout: "no" }) as unknown as TransportProcess,
    };
    const bad = await rejection(
      session(PYTHON_ENTRY, {
        launcher: shapeless,
        command: COMMAND,
        maxRetries: 0,
      }),
      WorkerStartError,
    );
    assert.match(
      bad.message,
      /launcher "shapeless": its stdin is not a WritableStream/,
    );
  });

  test("a transport's start that hangs ends at startTimeoutMs, aborted, and a late process is ended", async () => {
    let aborted = false;
    let killed = false;
    let late: (() => void) | undefined;
    const hanging: WorkerTransport = {
      name: "hangs",
      start(request) {
        return new Promise<TransportProcess>((resolve) => {
          request.signal.addEventListener("abort", () => {
            aborted = true;
          });
          late = () =>
            resolve({
              stdin: new WritableStream(),
              stdout: new ReadableStream(),
              exited: new Promise(() => {}),
              kill: () => {
                killed = true;
              },
            });
        });
      },
    };
    const timedOut = await rejection(
      session(PYTHON_ENTRY, {
        launcher: hanging,
        command: COMMAND,
        startTimeoutMs: 300,
      }),
      WorkerTimeoutError,
    );
    assert.equal(timedOut.phase, "start");
    assert.equal(aborted, true, "the request's signal is aborted");
    late?.();
    await until(() => killed, 5_000, "the late process to be ended");
  });

  test("a transport's worker that never reports its exit counts as gone after a kill", async () => {
    let stdout!: ReadableStreamDefaultController<Uint8Array>;
    const silent: WorkerTransport = {
      name: "silent",
      start: () => ({
        stdin: new WritableStream(),
        stdout: new ReadableStream({
          start: (controller) => {
            stdout = controller;
          },
        }),
        // Never settles: a transport with a bug.
        exited: new Promise(() => {}),
        kill: () => {},
      }),
    };
    const since = Date.now();
    const error = await rejection(
      session(PYTHON_ENTRY, {
        launcher: silent,
        command: COMMAND,
        startTimeoutMs: 200,
        maxRetries: 0,
      }),
      WorkerTimeoutError,
    );
    assert.equal(error.phase, "start");
    assert.ok(Date.now() - since < 12_000, "the start settled");
    try {
      stdout.close();
    } catch {
      // Cancelled by airlock once the worker counted as gone.
    }
  });

  test("limits under strict refuse a transport; best-effort starts without them", async () => {
    const bridge = await startBridge();
    try {
      const launcher = bridgeTransport(bridge.port);
      const refused = await rejection(
        session(PYTHON_ENTRY, {
          launcher,
          command: COMMAND,
          limits: { memoryBytes: 256 * 2 ** 20 },
        }),
        PermissionError,
      );
      assert.match(refused.message, /launcher/);
      await using s = await session<ConformanceWorker>(PYTHON_ENTRY, {
        launcher,
        command: COMMAND,
        limits: { memoryBytes: 256 * 2 ** 20, enforce: "best-effort" },
        onStderr: () => {},
      });
      assert.equal(await s.add(1, 2), 3);
      assert.equal(
        s.stats().rssBytes,
        undefined,
        "its memory is not read from here",
      );
    } finally {
      await bridge.kill();
    }
  });

  test("a launcher that is neither an argv prefix nor a transport is a TypeError", async () => {
    await rejection(
      session(PYTHON_ENTRY, {
        launcher: { name: 1, start: "x" } as unknown as WorkerTransport,
        command: COMMAND,
      }),
      TypeError,
    );
    assert.throws(
      () =>
        pool(PYTHON_ENTRY, {
          launchers: [
            ["env"],
            { name: "no start" } as unknown as WorkerTransport,
          ],
          command: COMMAND,
        }),
      /launchers\[1\]/,
    );
  });

  test("session() runs a TypeScript worker module through a transport", async () => {
    const bridge = await startBridge();
    try {
      const module = new URL(
        "../conformance/typescript_worker.ts",
        import.meta.url,
      );
      await using s = await session<ConformanceWorker>(module, {
        launcher: bridgeTransport(bridge.port),
        onStderr: () => {},
      });
      assert.equal(await s.add(20, 22), 42);
      assert.equal(await s.echo("it's $HOME; &"), "it's $HOME; &");
    } finally {
      await bridge.kill();
    }
  });

  test("pool() over two transports: one lost is set aside, the other carries the load, and it is used again once back", async () => {
    const quiet = captureLog();
    const a = await startBridge();
    let b = await startBridge();
    const port = b.port;
    const logA = freshLog();
    const logB = freshLog();
    try {
      await using p = pool<ConformanceWorker>(PYTHON_ENTRY, {
        ...quiet,
        launchers: [bridgeTransport(a.port, logA), bridgeTransport(port, logB)],
        command: COMMAND,
        max: 4,
        maxRetries: 1,
      });
      const shares = () => {
        const load = [0, 0];
        for (const worker of p.stats().perWorker) {
          if (!worker.retiring) {
            load[worker.launcher] = (load[worker.launcher] ?? 0) + 1;
          }
        }
        return load;
      };
      await within(
        Promise.all(Array.from({ length: 4 }, () => p.delay(300, "x"))),
        30_000,
        "four calls",
      );
      // On a loaded machine a worker may answer a second call before the
      // fourth start ends: the four starts were all placed, so wait for them.
      await until(
        () => shares()[0]! + shares()[1]! === 4,
        30_000,
        "the four workers up",
      );
      assert.deepEqual(shares(), [2, 2], "least loaded: two per bridge");

      // Bridge b is lost: its workers see end-of-file, its starts fail.
      const onB = [...logB.pids];
      await b.kill();
      for (const pid of onB) {
        await until(
          () => !isAlive(pid),
          10_000,
          `worker ${pid} on the lost bridge`,
        );
      }
      // Calls sent before the pool saw the loss could fail with it
      // (`executed: "maybe"`): wait until it has.
      await until(
        () => !p.stats().perWorker.some((worker) => worker.launcher === 1),
        10_000,
        "the pool to see bridge b's workers gone",
      );
      const during = await within(
        Promise.all(Array.from({ length: 16 }, (_, i) => p.delay(50, i))),
        30_000,
        "calls while bridge b is out",
      );
      assert.equal(during.length, 16);
      await until(
        () => shares()[1] === 0 && (shares()[0] ?? 0) >= 2,
        20_000,
        "bridge b's workers replaced on a",
      );
      const startsWhileOut = logB.starts;

      // Back on the same port: the pool moves workers to it again.
      b = await startBridge(port);
      await until(
        async () => {
          await p.delay(20, "tick");
          return (shares()[1] ?? 0) >= 1;
        },
        40_000,
        "a worker on bridge b again",
      );
      assert.ok(logB.starts > startsWhileOut, "bridge b was tried again");
      assert.equal(await p.add(2, 2), 4);
    } finally {
      await a.kill();
      await b.kill();
    }
    for (const pid of [...logA.pids, ...logB.pids]) {
      await until(() => !isAlive(pid), 10_000, `worker ${pid} to exit`);
    }
  });

  test("pool() with every transport failing names each in its error", async () => {
    const bridge = await startBridge();
    const port = bridge.port;
    await bridge.kill();
    await using p = pool<ConformanceWorker>(PYTHON_ENTRY, {
      launchers: [bridgeTransport(port)],
      command: COMMAND,
      onStderr: () => {},
    });
    let error: WorkerStartError | undefined;
    for (
      let i = 0;
      i < 3 && error?.message.includes("set aside") !== true;
      i++
    ) {
      error = await rejection(p.add(1, 1), WorkerStartError);
    }
    assert.match(
      error?.message ?? "",
      new RegExp(`launcher 0 \\("bridge 127.0.0.1:${port}", set aside`),
    );
  });

  test("oneShot() runs each call through a transport, a spare included", async () => {
    const bridge = await startBridge();
    const log = freshLog();
    try {
      const fresh = oneShot<ConformanceWorker>(PYTHON_ENTRY, {
        launcher: bridgeTransport(bridge.port, log),
        command: COMMAND,
        spares: 1,
        onStderr: () => {},
      });
      assert.equal(await fresh.add(1, 2), 3);
      assert.equal(await fresh.add(3, 4), 7);
      assert.ok(log.starts >= 2, "a worker per call, through the transport");
      await within(fresh.close(), 15_000, "close()");
      for (const pid of log.pids) {
        await until(() => !isAlive(pid), 10_000, `far worker ${pid} to exit`);
      }
    } finally {
      await bridge.kill();
    }
  });

  test("pool() refuses maxRssBytes behind a transport", () => {
    assert.throws(
      () =>
        pool(PYTHON_ENTRY, {
          launcher: bridgeTransport(1),
          command: COMMAND,
          maxRssBytes: 2 ** 30,
        }),
      /maxRssBytes.*launcher runs elsewhere/,
    );
  });
});
