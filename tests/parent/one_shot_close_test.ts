// oneShot() on the shared mode core (issue 29, item 4): close({ force })
// and closeTimeoutMs end the calls still running, as in the other modes.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { oneShot, SessionClosedError } from "../../mod.ts";
import { liveWorkers } from "../../testing.ts";
import type outcome from "../fixtures/outcome_worker.ts";
import { fixture } from "../_helpers/files.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { rejection, until } from "../_helpers/wait.ts";

checkNoLeaks();

const worker = fixture("outcome_worker.ts");

function running(): number {
  return liveWorkers().filter((w) => w.module.includes("outcome_worker"))
    .length;
}

describe("oneShot() close", () => {
  test('oneShot() close({ force }) ends a running call ("maybe") and resolves once its process is gone', async () => {
    const run = oneShot<typeof outcome>(worker, captureLog());
    const call = run.call("delay", [60_000, "x"]);
    await until(() => running() === 1, 30_000, "the call's process");
    await run.close({ force: true });
    assert.equal(running(), 0, "its process is gone");
    const error = await rejection(call, SessionClosedError);
    assert.equal(error.kind, "oneShot");
    // "no" if its process was still starting, "maybe" once written.
    assert.ok(error.executed === "maybe" || error.executed === "no");
    const refused = await rejection(run.call("echo", [1]), SessionClosedError);
    assert.equal(refused.executed, "no");
  });

  test("oneShot() closeTimeoutMs bounds a plain close()", async () => {
    const run = oneShot<typeof outcome>(worker, {
      ...captureLog(),
      closeTimeoutMs: 300,
    });
    assert.equal(await run.echo("first"), "first");
    const call = run.call("delay", [60_000, "x"]);
    await until(() => running() === 1, 30_000, "the call's process");
    const started = Date.now();
    await run.close();
    assert.ok(Date.now() - started < 20_000, "close() did not wait a minute");
    await rejection(call, SessionClosedError);
    assert.equal(running(), 0);
  });
});
