// Attack (issue 24, item 3): a worker answers an awaited call with 300
// `items` messages of ~1 MB and an `end`. A call awaited as a whole credits
// its values back at once, so the window never held it back: the parent grew
// 363-460 MiB and the call resolved to 300,000 values. Now a stream awaited
// whole is bounded (COLLECT_MAX_ITEMS values, COLLECT_MAX_BYTES bytes: 64
// MiB) and refused past it with a ProtocolError, and `items` for a call that
// must be answered with a value (a setup call) is a protocol error.
import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { ProtocolError, session, WorkerStartError } from "../../mod.ts";
import { captureLog } from "../_helpers/log.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";
import { rejection } from "../_helpers/wait.ts";

checkNoLeaks();

const path = fileURLToPath(
  new URL("../fixtures/security/stream_collect_command.ts", import.meta.url),
);
const command = RUNTIME === "deno"
  ? [process.execPath, "run", "--quiet", path]
  : [process.execPath, path];

test("a stream awaited as a whole is refused past its bound, and the parent stays small", async () => {
  // Granted everything: the attack is on the protocol, not the sandbox.
  await using s = await session(path, {
    ...captureLog(),
    command,
    permissions: "all",
  });
  const before = process.memoryUsage().rss;
  let peak = before;
  const sampler = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss);
  }, 5);
  let error: ProtocolError;
  try {
    error = await rejection(s.call("rows", []), ProtocolError);
  } finally {
    clearInterval(sampler);
  }
  peak = Math.max(peak, process.memoryUsage().rss);
  assert.match(error.message, /awaited as a whole passed/);
  assert.equal(error.executed, "maybe");
  const grewMiB = (peak - before) / 2 ** 20;
  assert.ok(grewMiB < 200, `the parent grew ${grewMiB.toFixed(0)} MiB`);
});

test("a setup call answered with items fails the start", async () => {
  const error = await rejection(
    session(path, {
      ...captureLog(),
      command,
      permissions: "all",
      setup: [["rows"]],
      maxRetries: 0,
    }),
    WorkerStartError,
  );
  assert.match(
    `${error.message} ${String(error.cause)}`,
    /must be answered with a value/,
  );
});
