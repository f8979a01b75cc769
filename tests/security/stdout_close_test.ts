// A worker that closes its stdout and keeps running can never answer: the
// parent kills it once its stdout has ended and fails its calls with a
// WorkerCrashedError saying so. 0.1 left the calls waiting for their
// deadlines (five minutes by default). The worker runs on Bun outside the
// OS sandbox: there a worker can close every descriptor of its stdout
// (Deno keeps its own copies, and inside the sandbox bubblewrap's processes
// hold the pipe, so no end-of-file is ever seen: docs/operations.md).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { session, WorkerCrashedError } from "../../mod.ts";
import { checkNoLeaks, fixture, within } from "../_helpers.ts";

checkNoLeaks();

const rogue = fixture("reliability/rogue_worker.ts");

describe("stdout close", () => {
  test("session() kills a worker that closed its stdout, fails its call with WorkerCrashedError, and starts a fresh one", async () => {
    await using s = await session(rogue, {
      runtime: "bun",
      sandbox: "none",
      permissions: "all",
      onStderr: () => {},
      callTimeoutMs: 300_000,
    });
    const pid = s.pid;
    const error = await within(
      s.call("closeStdout", []).then(
        () => assert.fail("closeStdout answered"),
        (error: unknown) => error,
      ),
      60_000,
      "the call of a worker that closed its stdout",
    );
    assert.ok(error instanceof WorkerCrashedError, String(error));
    assert.equal(error.op, "closeStdout");
    assert.equal(error.signal, "SIGKILL");
    assert.match(error.reason ?? "", /closed its stdout/);
    assert.equal(await s.call("ok", []), "ok");
    assert.notEqual(s.pid, pid);
  });
});
