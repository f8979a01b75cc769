// stderr without newlines: a worker writing megabytes without a newline.
// The parent hands the log sink lines of at most MAX_LOG_LINE_CHARS, loses
// nothing, and does constant work per byte with bounded memory. 0.1 kept
// the unfinished line and split it again on every chunk: 100 MiB stalled a
// Deno parent for 20 s, 300 MiB took a Bun parent to 4.5 GB.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { session } from "../../mod.ts";
import {
  LineSplitter,
  MAX_LOG_LINE_CHARS,
  OutputTail,
  STDERR_TAIL_BYTES,
} from "../../src/parent/_log.ts";
import { fixture } from "../_helpers/files.ts";
import { checkNoLeaks } from "../_helpers/processes.ts";
import { until } from "../_helpers/wait.ts";

checkNoLeaks();

const rogue = fixture("reliability/rogue_worker.ts");
const MiB = 1024 * 1024;

function split(chunks: string[]): string[] {
  const lines: string[] = [];
  const splitter = new LineSplitter();
  for (const chunk of chunks) splitter.push(chunk, (line) => lines.push(line));
  splitter.end((line) => lines.push(line));
  return lines;
}

describe("stderr flood", () => {
  test("LineSplitter splits lines across chunks and cuts long ones at MAX_LOG_LINE_CHARS", () => {
    assert.deepEqual(split(["a\nb", "c\n", "\nd"]), ["a", "bc", "", "d"]);
    const max = MAX_LOG_LINE_CHARS;
    assert.deepEqual(split(["x".repeat(max) + "\n"]), ["x".repeat(max)]);
    assert.deepEqual(split(["x".repeat(max + 1) + "\n"]), [
      "x".repeat(max),
      "x",
    ]);
    const long = "y".repeat(3 * max + 5);
    const whole = split([long]);
    assert.deepEqual(whole, [
      "y".repeat(max),
      "y".repeat(max),
      "y".repeat(max),
      "yyyyy",
    ]);
    // One character at a time gives the same lines.
    assert.deepEqual(split([...long]), whole);
    const mixed = `ab\n${"z".repeat(max + 3)}\ncd`;
    assert.deepEqual(split([...mixed]), split([mixed]));
  });

  test("OutputTail keeps the last STDERR_TAIL_BYTES characters", () => {
    const tail = new OutputTail();
    for (let i = 0; i < 50_000; i++) tail.push(String(i % 10));
    assert.equal(tail.text.length, STDERR_TAIL_BYTES);
    assert.ok(tail.text.endsWith("56789"));
    tail.push("q".repeat(3 * STDERR_TAIL_BYTES));
    assert.equal(tail.text, "q".repeat(STDERR_TAIL_BYTES));
  });

  test("session() logs 16 MiB of stderr without a newline in bounded lines while the worker keeps answering", async () => {
    const total = 16 * MiB;
    let chars = 0;
    let longest = 0;
    await using s = await session(rogue, {
      callTimeoutMs: 120_000,
      onStderr: (line) => {
        chars += line.length;
        if (line.length > longest) longest = line.length;
      },
    });
    assert.equal(await s.call("stderr", [total, "x"]), total);
    assert.equal(await s.call("ok", []), "ok");
    // All but the unfinished last piece arrive while the worker runs.
    await until(
      () => chars >= total - MAX_LOG_LINE_CHARS,
      60_000,
      `the log received ${total} characters (has ${chars})`,
    );
    assert.ok(longest <= MAX_LOG_LINE_CHARS, `a line of ${longest} characters`);
    assert.equal(s.stats().restarts, 0);
  });

  test("session() logs 8 MiB of stray stdout without a newline in bounded lines, and the frame stream survives", async () => {
    const total = 8 * MiB;
    let chars = 0;
    let longest = 0;
    await using s = await session(rogue, {
      callTimeoutMs: 120_000,
      onStderr: (line, source) => {
        if (source.stream !== "stdout") return;
        chars += line.length;
        if (line.length > longest) longest = line.length;
      },
    });
    assert.equal(await s.call("stderr", [total, "y", 64 * 1024, 1]), total);
    assert.equal(await s.call("ok", []), "ok");
    await until(
      () => chars >= total - MAX_LOG_LINE_CHARS,
      60_000,
      `the log received ${total} characters of stray stdout (has ${chars})`,
    );
    assert.ok(longest <= MAX_LOG_LINE_CHARS, `a line of ${longest} characters`);
    assert.equal(s.stats().restarts, 0);
  });
});
