// The suite's own helpers (tests/_helpers/): rejection(), scratchDir(),
// needs() and skipUnless() without a reason (with one, it registers a skip,
// or under AIRLOCK_REQUIRE_TOOLS=1 a failing test), so a helper that stopped
// failing would be seen.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, writeFileSync } from "node:fs";
import { RemoteError, WorkerCrashedError } from "../../mod.ts";
import { scratchDir } from "../_helpers/files.ts";
import { hasTool, needs, skipUnless } from "../_helpers/tools.ts";
import { rejection } from "../_helpers/wait.ts";

describe("rejection()", () => {
  test("rejection() returns the error of the expected class", async () => {
    const thrown = new TypeError("bad");
    assert.equal(await rejection(Promise.reject(thrown), TypeError), thrown);
    assert.equal(
      await rejection(() => {
        throw thrown;
      }, Error),
      thrown,
      "a synchronous throw of the function counts",
    );
  });

  test("rejection() fails when the promise resolves, naming the value", async () => {
    const failure = await rejection(
      rejection(Promise.resolve(42), RemoteError),
      assert.AssertionError,
    );
    assert.match(failure.message, /RemoteError, but it resolved with 42/);
  });

  test("rejection() fails on another class, keeping the actual error", async () => {
    const other = new RangeError("out of range");
    const failure = await rejection(
      rejection(Promise.reject(other), WorkerCrashedError),
      assert.AssertionError,
    );
    assert.match(failure.message, /WorkerCrashedError, got RangeError/);
    assert.equal(failure.actual, other);
    assert.equal(failure.cause, other);
  });
});

describe("scratchDir()", () => {
  test("scratchDir() is removed with its content at the end of its scope", () => {
    let path: string;
    {
      using dir = scratchDir("helpers");
      path = dir.path;
      writeFileSync(dir.join("x.txt"), "x");
      assert.ok(existsSync(dir.join("x.txt")));
    }
    assert.equal(existsSync(path), false);
  });
});

describe("needs() and skipUnless()", () => {
  test("needs() gives no options for a tool that is here, and skipUnless() none without a reason", () => {
    assert.deepEqual(skipUnless(undefined), {});
    if (hasTool("setpriv")) assert.deepEqual(needs("setpriv"), {});
  });
});
