// Attack: a worker that streams past its window, ignoring credit, to make
// the parent buffer without bound. The parent refuses the first message
// past the window as a protocol error, stops the worker, fails the call
// with WorkerCrashedError (cause: ProtocolError), and never retries it.
import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { ProtocolError, session, WorkerCrashedError } from "../../mod.ts";
import { liveWorkers } from "../../testing.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const path = fileURLToPath(
  new URL("../fixtures/stream_flood_command.ts", import.meta.url),
);
const command = RUNTIME === "deno"
  ? [process.execPath, "run", "--quiet", path]
  : [process.execPath, path];

test("a worker streaming past its window fails the stream with a protocol error, never retried", async () => {
  // Granted everything: the attack is on the protocol, not the sandbox.
  await using s = await session(path, {
    ...captureLog(),
    command,
    permissions: "all",
  });
  const iterator = s.stream("flood", [], { windowItems: 1_500 })[
    Symbol.asyncIterator
  ]();
  // The consumer takes one value and stops there: nothing is credited.
  const seen: unknown[] = [(await iterator.next()).value];
  await until(
    () => !liveWorkers().some((w) => w.module.includes("stream_flood")),
    15_000,
    "the worker to be stopped",
  );
  let failure: unknown;
  try {
    for (
      let step = await iterator.next();
      !step.done;
      step = await iterator.next()
    ) {
      seen.push(step.value);
    }
  } catch (error: unknown) {
    failure = error;
  }
  assert.ok(failure instanceof WorkerCrashedError, String(failure));
  assert.ok(failure.cause instanceof ProtocolError, String(failure.cause));
  assert.match(failure.cause.message, /past its window/);
  assert.ok(seen.length <= 1_500, `${seen.length} values held`);
});
