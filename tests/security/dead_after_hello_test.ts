// Attack class: a worker that says hello and is stopped before it takes a
// call (a frame past maxFrameBytes right behind the hello, or, through a
// launcher transport, a stdout that errors). The start resolved with a
// dead worker; the session (and the pool) restarted it for the queued call,
// which the next one never took either, again and again: with
// callTimeoutMs 0 the call never settled (19 restarts on Deno, 85 on Bun
// in 20 s), with the default it waited 300 s while workers were started as
// fast as they died. Now such a start is a failed start, retried up to
// maxRetries, and the queued calls fail with its WorkerStartError.
// Runs with and without bubblewrap alike (the command runs unconfined; the
// transport runs the worker here, as a launcher does).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import process from "node:process";
import {
  pool,
  session,
  WorkerCrashedError,
  WorkerStartError,
  type WorkerTransport,
} from "../../mod.ts";
import type { TransportProcess } from "../../types.ts";
import type evaluate from "../fixtures/security/eval_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { rejection, within } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("security/eval_worker.ts");
const STOPPED = /stopped right after its hello, before it took a call/;

/**
 * Runs the worker here through `node:child_process`; every start after the
 * first hands back a stdout that errors right behind the worker's first
 * chunk (its hello).
 */
function breakingTransport(): WorkerTransport & { starts: number } {
  const transport = {
    name: "breaks after the first",
    starts: 0,
    start(
      request: {
        argv: readonly string[];
        env: Record<string, string>;
        cwd: string;
      },
    ): TransportProcess {
      const [program = "", ...args] = request.argv;
      const child = spawn(program, args, {
        env: request.env,
        cwd: request.cwd,
        stdio: ["pipe", "pipe", "pipe"],
      });
      const exited = new Promise<
        { code: number | null; signal: string | null }
      >(
        (resolve) =>
          child.on("exit", (code, signal) => resolve({ code, signal })),
      );
      const out = Readable.toWeb(child.stdout) as ReadableStream<Uint8Array>;
      let stdout = out;
      if (++transport.starts > 1) {
        const reader = out.getReader();
        let chunks = 0;
        stdout = new ReadableStream<Uint8Array>({
          async pull(controller) {
            const { done, value } = await reader.read();
            if (done) return controller.close();
            controller.enqueue(value);
            if (++chunks === 1) controller.error(new Error("the link broke"));
          },
        });
      }
      return {
        stdin: Writable.toWeb(child.stdin) as WritableStream<Uint8Array>,
        stdout,
        stderr: Readable.toWeb(child.stderr) as ReadableStream<Uint8Array>,
        exited,
        kill: (signal) => child.kill(signal),
        ...(child.pid === undefined ? {} : { pid: child.pid }),
      };
    },
  };
  return transport;
}

describe("a worker stopped right after its hello", () => {
  test("its start fails after maxRetries, it is not restarted for ever", async () => {
    const program = fileURLToPath(
      new URL(
        "../fixtures/security/hello_then_garbage_command.ts",
        import.meta.url,
      ),
    );
    const runtime = process.execPath;
    const error = await within(
      rejection(
        session<typeof evaluate>(worker, {
          ...captureLog(),
          // Unconfined, as in pid_namespace_test: Deno as a command needs
          // its cache directory.
          permissions: "all",
          callTimeoutMs: 0,
          command: RUNTIME === "deno"
            ? [runtime, "run", "-A", "--quiet", program]
            : [runtime, program],
        }),
        WorkerStartError,
      ),
      60_000,
      "the start to fail",
    );
    assert.equal(error.failure, "retries");
    assert.match(error.message, STOPPED);
    assert.match(error.message, /protocol error/);
  });

  test("a session's queued call fails when every restart is stopped so", async () => {
    const transport = breakingTransport();
    await using s = await session<typeof evaluate>(worker, {
      ...captureLog(),
      launcher: transport,
      callTimeoutMs: 0,
    });
    assert.deepEqual(await s.run("return 1"), { ok: true, value: 1 });
    await rejection(s.run("process.exit(3)"), WorkerCrashedError);
    const error = await within(
      rejection(s.run("return 2"), WorkerStartError),
      60_000,
      "the queued call to settle",
    );
    assert.match(error.message, STOPPED);
    assert.match(error.message, /the link broke/);
    assert.equal(transport.starts, 4, "the first start and maxRetries + 1");
  });

  test("a pool's queued call fails when every replacement is stopped so", async () => {
    const transport = breakingTransport();
    await using p = await pool<typeof evaluate>(worker, {
      ...captureLog(),
      min: 1,
      max: 1,
      launcher: transport,
      callTimeoutMs: 0,
    });
    assert.deepEqual(await p.run("return 1"), { ok: true, value: 1 });
    await rejection(p.run("process.exit(3)"), WorkerCrashedError);
    const error = await within(
      rejection(p.run("return 2"), WorkerStartError),
      60_000,
      "the queued call to settle",
    );
    assert.match(error.message, STOPPED);
  });
});
