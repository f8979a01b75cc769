// exitThroughWrapper() (src/runtime/launch/exit.ts): a wrapper's exit status
// mapped back to the worker's signal.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { exitThroughWrapper } from "../../src/runtime/launch/exit.ts";

describe("exitThroughWrapper()", () => {
  test("exitThroughWrapper() maps 128 + N to the signal's name", () => {
    for (
      const [code, signal] of [
        [137, "SIGKILL"],
        [143, "SIGTERM"],
        [139, "SIGSEGV"],
        [134, "SIGABRT"],
        [130, "SIGINT"],
        [129, "SIGHUP"],
      ] as const
    ) {
      assert.deepEqual(exitThroughWrapper(code, null), { code: null, signal });
    }
  });

  test("exitThroughWrapper() maps every real signal number up to 64", {
    skip: process.platform !== "linux" && "real-time signals are Linux's",
  }, () => {
    assert.deepEqual(exitThroughWrapper(128 + 34, null), {
      code: null,
      signal: "SIGRTMIN",
    });
    assert.deepEqual(exitThroughWrapper(128 + 40, null), {
      code: null,
      signal: "SIGRTMIN+6",
    });
    assert.deepEqual(exitThroughWrapper(128 + 64, null), {
      code: null,
      signal: "SIGRTMAX",
    });
  });

  test("exitThroughWrapper() leaves ordinary exit codes alone", () => {
    for (const code of [0, 1, 2, 127, 128, 193, 255]) {
      assert.deepEqual(
        exitThroughWrapper(code, null),
        { code, signal: null },
        String(code),
      );
    }
  });

  test("exitThroughWrapper() passes through a signal that ended the wrapper itself", () => {
    assert.deepEqual(exitThroughWrapper(null, "SIGKILL"), {
      code: null,
      signal: "SIGKILL",
    });
  });
});
