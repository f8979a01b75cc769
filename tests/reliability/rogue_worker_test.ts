// Rogue workers: a worker that writes a length of 0xFFFFFFFF, a bad header,
// a head that is not CBOR, garbage or half a frame makes its call (or its
// start) fail with a typed error, and the parent's memory does not grow by
// what the worker claimed.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { fileURLToPath } from "node:url";
import {
  ProtocolError,
  session,
  WorkerCrashedError,
  WorkerStartError,
  WorkerTimeoutError,
} from "../../mod.ts";
import { readRssBytes } from "../../src/runtime/proc.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks, isAlive } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { needsWorkers } from "../_helpers/tools.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const rogue = new URL(
  "../fixtures/reliability/rogue_worker.ts",
  import.meta.url,
);
const MiB = 1024 * 1024;

function rss(): number {
  return readRssBytes(process.pid) ?? 0;
}

function rogueCommand(kind: string): string[] {
  const path = fileURLToPath(
    new URL("../fixtures/reliability/rogue_command.ts", import.meta.url),
  );
  return RUNTIME === "deno"
    ? [process.execPath, "run", "--quiet", path, kind]
    : [process.execPath, path, kind];
}

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return await promise.then(
    (value) => assert.fail(`expected a failure, got ${String(value)}`),
    (error: unknown) => error,
  );
}

function assertProtocolCrash(error: unknown, pattern: RegExp): void {
  assert.ok(error instanceof WorkerCrashedError, String(error));
  assert.ok(error.cause instanceof ProtocolError, String(error.cause));
  assert.match(error.cause.message, pattern);
  assert.match(error.reason ?? "", /broke the protocol/);
}

describe("rogue workers", needsWorkers(), () => {
  test("session() a worker claiming a frame of 0xFFFFFFFF bytes fails the call with a ProtocolError-caused crash, without allocating it", async () => {
    await using s = await session(rogue, captureLog());
    const before = rss();
    const pid = s.pid!;
    const error = await failure(s.call("claim", [0xffffffff, 1024, "hang"]));
    assertProtocolCrash(
      error,
      /length 4294967295 exceeds maxFrameBytes 268435456/,
    );
    const grown = rss() - before;
    assert.ok(grown < 64 * MiB, `parent RSS grew ${grown} bytes`);
    await until(() => !isAlive(pid), 5_000, "the rogue worker was killed");
    assert.equal(await s.call("ok", []), "ok", "replaced by a fresh worker");
  });

  test("session() with maxFrameBytes 0xFFFFFFFF, a claim of 4 GiB cut short grows the parent only by what arrived", async () => {
    await using s = await session(rogue, {
      ...captureLog(),
      maxFrameBytes: 0xffffffff,
    });
    const before = rss();
    const error = await failure(
      s.call("claim", [0xffffffff, 8 * MiB, "exit"]),
    );
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.exitCode, 0);
    assert.equal(error.op, "claim");
    const grown = rss() - before;
    assert.ok(grown < 64 * MiB, `parent RSS grew ${grown} bytes`);
  });

  test("session() a frame header of another version, or a head that is not CBOR, is a ProtocolError-caused crash", async () => {
    await using s = await session(rogue, captureLog());
    assertProtocolCrash(
      await failure(s.call("badVersion", [])),
      /protocol version 9/,
    );
    assertProtocolCrash(
      await failure(s.call("badHead", [])),
      /Cannot decode value/,
    );
    assert.equal(await s.call("ok", []), "ok");
  });

  test("session() garbage then exit: the call fails with a crash and the garbage reaches the log and the tail", async () => {
    const log = captureLog();
    await using s = await session(rogue, log);
    const error = await failure(s.call("garbage", ["not a frame at all\n"]));
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.exitCode, 0);
    assert.match(error.stderrTail, /not a frame at all/);
    assert.ok(log.lines.includes("not a frame at all"));
  });

  test("session() a half frame that never completes times out once; the worker fails the liveness check and the next call runs on a fresh one", async () => {
    await using s = await session(rogue, captureLog());
    const pid = s.pid!;
    const first = await failure(
      s.call("claim", [100, 10, "hang"], { timeoutMs: 200 }),
    );
    assert.ok(first instanceof WorkerTimeoutError, String(first));
    // Its pong is swallowed by the half frame: nothing it writes can be
    // read again, so it counts as wedged and is replaced before this call.
    assert.equal(await s.call("ok", [], { timeoutMs: 30_000 }), "ok");
    await until(() => !isAlive(pid), 5_000, "the stuck worker was killed");
    assert.notEqual(s.pid, pid);
  });

  test("session() a command claiming 0xFFFFFFFF bytes before its hello fails to start with a handshake error", async () => {
    const before = rss();
    const error = await failure(
      session(rogue, {
        ...captureLog(),
        // A command is confined like any worker; this one is about the
        // protocol, and Deno as a command needs its cache directory.
        permissions: "all",
        command: rogueCommand("claim"),
        maxRetries: 0,
      }),
    );
    assert.ok(error instanceof WorkerStartError, String(error));
    assert.equal(error.failure, "handshake");
    assert.ok(error.cause instanceof ProtocolError);
    assert.match(error.cause.message, /4294967295/);
    assert.ok(rss() - before < 64 * MiB);
  });

  test("session() a command that prints garbage or half a hello and exits fails to start, saying so", async () => {
    const garbage = await failure(
      session(rogue, {
        ...captureLog(),
        // A command is confined like any worker; this one is about the
        // protocol, and Deno as a command needs its cache directory.
        permissions: "all",
        command: rogueCommand("garbage"),
        maxRetries: 0,
      }),
    );
    assert.ok(garbage instanceof WorkerStartError, String(garbage));
    assert.equal(garbage.failure, "exited");
    assert.equal(garbage.exitCode, 3);
    assert.match(garbage.stderrTail, /this is not a frame/);

    const half = await failure(
      session(rogue, {
        ...captureLog(),
        // A command is confined like any worker; this one is about the
        // protocol, and Deno as a command needs its cache directory.
        permissions: "all",
        command: rogueCommand("half"),
        maxRetries: 0,
      }),
    );
    assert.ok(half instanceof WorkerStartError, String(half));
    assert.equal(half.failure, "exited");
    assert.match(half.message, /frame was cut short/);
  });
});
