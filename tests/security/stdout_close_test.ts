// A worker that closes its stdout and keeps running can never answer: the
// parent kills it and fails its calls with a WorkerCrashedError saying so.
// 0.1 left the calls waiting for their deadlines (five minutes by default).
// Outside the OS sandbox the parent sees its stdout end; inside, the
// sandbox's own processes hold the pipe too, so while calls are in flight
// the parent checks that the worker still holds it. The workers run on Bun:
// there a worker can close every descriptor of its stdout from JavaScript
// (Deno keeps a copy that only native code could close).
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { session, WorkerCrashedError } from "../../mod.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { needsSandbox } from "../_helpers/tools.ts";
import { within } from "../_helpers/wait.ts";

checkNoLeaks();

const rogue = fixture("reliability/rogue_worker.ts");

const OUTSIDE = { sandbox: "none", permissions: "all" } as const;
const INSIDE = { sandbox: "os" } as const;

describe("stdout close", () => {
  for (
    const [where, confinement, skip] of [
      ["outside the OS sandbox", OUTSIDE, {}],
      ["inside the OS sandbox", INSIDE, needsSandbox()],
    ] as const
  ) {
    test(
      `session() ${where} kills a worker that closed its stdout, fails its call with WorkerCrashedError, and starts a fresh one`,
      skip,
      async () => {
        await closesStdout(confinement);
      },
    );
  }
});

async function closesStdout(
  confinement: typeof OUTSIDE | typeof INSIDE,
): Promise<void> {
  {
    await using s = await session(rogue, {
      runtime: "bun",
      ...confinement,
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
  }
}
