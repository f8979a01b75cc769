// deno-lint-ignore-file no-console
/**
 * Fuzzes the frame reader, the message decoder and the value decoder with
 * fast-check: random byte streams, mutated frame streams, hostile headers
 * (lengths up to 0xFFFFFFFF), random or mutated message heads, and nested
 * amplifiers (few bytes that build much memory) under a memory budget. The
 * invariants are in tests/protocol/_fuzz.ts.
 *
 * Usage: `deno task fuzz [--cases N] [--seed S]` (default 100,000 cases in
 * all, split over the targets; a fresh seed, printed, to replay a failure).
 * Also runs on Bun: `bun scripts/fuzz.ts --cases N`.
 *
 * @module
 */

import fc from "fast-check";
import process from "node:process";
import { fuzzTargets } from "../tests/protocol/_fuzz.ts";

function option(name: string, fallback: number): number {
  const args = process.argv.slice(2);
  const index = args.indexOf(`--${name}`);
  const raw = index === -1
    ? args.find((arg) => arg.startsWith(`--${name}=`))?.split("=")[1]
    : args[index + 1];
  if (raw === undefined) return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < 0) {
    console.error(
      `Invalid --${name}: expected a whole number, received ${raw}`,
    );
    process.exit(2);
  }
  return value;
}

const cases = option("cases", 100_000);
const seed = option("seed", (Date.now() ^ (process.pid << 8)) >>> 0) | 0;
const targets = fuzzTargets();
const weights = targets.reduce((sum, target) => sum + target.weight, 0);
const runtime = typeof (globalThis as { Bun?: unknown }).Bun === "object"
  ? "bun"
  : "deno";

console.log(`fuzz on ${runtime}: ${cases} cases, seed ${seed}`);
const started = performance.now();
let total = 0;
let failed = false;
for (const target of targets) {
  const numRuns = Math.max(1, Math.round((cases * target.weight) / weights));
  const begin = performance.now();
  const result = await fc.check(target.property, { numRuns, seed });
  const ms = performance.now() - begin;
  total += result.numRuns;
  if (result.failed) {
    failed = true;
    console.log(`FAIL ${target.name} after ${result.numRuns} cases`);
    console.log(fc.defaultReportMessage(result));
  } else {
    console.log(
      `ok   ${target.name}: ${result.numRuns} cases in ${
        (ms / 1000).toFixed(1)
      } s`,
    );
  }
}
const seconds = (performance.now() - started) / 1000;
console.log(
  `${failed ? "FAILED" : "passed"}: ${total} cases in ${seconds.toFixed(1)} s`,
);
process.exit(failed ? 1 : 0);
