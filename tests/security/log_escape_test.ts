// Terminal escape sequences from a worker: the default log sink prints a
// worker's stderr on the parent's terminal, so what a terminal acts on
// (escape sequences, \r, bidirectional overrides) is shown escaped. 0.1
// passed them through: a worker could clear the screen, retitle the window
// or overwrite earlier lines of the parent's output.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { defaultLogSink, escapeLogLine } from "../../src/parent/_log_sink.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { RUNTIME } from "../_helpers/runtime.ts";

checkNoLeaks();

/** How long the parent program may run. */
const PARENT_DEADLINE_MS = 60_000;

/** Runs the parent fixture and returns what it wrote to its stderr. */
function parentStderr(): Promise<string> {
  const script = fixture("security/log_escape_parent.ts").pathname;
  const argv = RUNTIME === "deno" ? ["run", "-A", script] : [script];
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, argv, {
      stdio: ["ignore", "ignore", "pipe"],
    });
    let err = "";
    const deadline = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`parent still running after ${PARENT_DEADLINE_MS} ms`));
    }, PARENT_DEADLINE_MS);
    child.stderr.on("data", (chunk) => err += chunk);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(deadline);
      if (code === 0) resolve(err);
      else reject(new Error(`parent exited with ${code}: ${err}`));
    });
  });
}

describe("log escape", () => {
  test("escapeLogLine() escapes what a terminal acts on and leaves other text alone", () => {
    assert.equal(escapeLogLine("plain\ttext é ✓"), "plain\ttext é ✓");
    assert.equal(
      escapeLogLine("\x1b[31mred\x1b[0m"),
      "\\x1b[31mred\\x1b[0m",
    );
    assert.equal(escapeLogLine("a\rb"), "a\\rb");
    assert.equal(escapeLogLine("\x07\x00\x7f\x9b"), "\\x07\\x00\\x7f\\x9b");
    assert.equal(escapeLogLine("a\u202eb\u2066c"), "a\\u202eb\\u2066c");
    // Twice in a row: the shared regular expression keeps no state.
    assert.equal(escapeLogLine("\x1b"), "\\x1b");
    assert.equal(escapeLogLine("\x1b"), "\\x1b");
  });

  test("defaultLogSink() prefixes and escapes each line and writes the lines of one chunk at once", async () => {
    const writes: string[] = [];
    const sink = defaultLogSink((text) => writes.push(text));
    const source = { module: "w.ts", pid: 7, stream: "stderr" as const };
    sink("one", source);
    sink("\x1b[2Jtwo\r", source);
    assert.deepEqual(writes, [], "held until the chunk is done");
    await Promise.resolve();
    assert.deepEqual(writes, ["[w.ts 7] one\n[w.ts 7] \\x1b[2Jtwo\\r\n"]);
    // A flood is written as it goes, a megabyte at a time.
    const line = "x".repeat(1000);
    for (let i = 0; i < 3000; i++) sink(line, source);
    assert.equal(writes.length, 3, "two full megabytes written already");
    await Promise.resolve();
    assert.equal(writes.length, 4);
    assert.equal(writes.join("").split("\n").length - 1, 3002);
  });

  test("session() default log sink prints a worker's escape sequences escaped on the parent's stderr", async () => {
    const err = await parentStderr();
    assert.match(err, /done!/, err);
    assert.ok(
      !err.includes("\x1b"),
      `raw ESC on the parent's stderr: ${JSON.stringify(err)}`,
    );
    assert.ok(
      !err.includes("\r"),
      `raw CR on the parent's stderr: ${JSON.stringify(err)}`,
    );
    assert.ok(!err.includes("\u202e"), "raw bidirectional override");
    assert.ok(!err.includes("\x07"), "raw BEL");
    assert.ok(
      err.includes("\\x1b[2J\\x1b]0;owned\\x07red\\x1b[31m\\rover\\u202eevil"),
      JSON.stringify(err),
    );
  });
});
