/**
 * Shared test helpers: fixture URLs, quiet log sinks, deadlines, runtime-only
 * tests, and the check that no process a test spawned outlives its file.
 *
 * @module
 */

import { after, test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";
import type { LogSource } from "../mod.ts";

/** The runtime running the tests. */
export const RUNTIME: "deno" | "bun" =
  typeof (globalThis as { Bun?: unknown }).Bun === "object" ? "bun" : "deno";

/** The other runtime. */
export const OTHER_RUNTIME: "deno" | "bun" = RUNTIME === "bun" ? "deno" : "bun";

/**
 * The URL of a fixture module.
 *
 * @param name File name under tests/fixtures/.
 * @returns Its URL.
 */
export function fixture(name: string): URL {
  return new URL(`./fixtures/${name}`, import.meta.url);
}

/** A log sink that keeps lines instead of printing them. */
export interface LogCapture {
  /** The sink to pass as `onStderr`. */
  onStderr: (line: string, source: LogSource) => void;
  /** The lines so far. */
  lines: string[];
}

/**
 * A log sink that keeps the worker's stderr lines.
 *
 * @returns The capture.
 */
export function captureLog(): LogCapture {
  const lines: string[] = [];
  const capture = { onStderr: (line: string) => void lines.push(line) };
  // Not enumerable: `{ ...captureLog() }` spreads into options, which refuse
  // unknown keys.
  Object.defineProperty(capture, "lines", { value: lines, enumerable: false });
  return capture as unknown as LogCapture;
}

/**
 * Rejects if `promise` has not settled within `ms`.
 *
 * @param promise What to wait for.
 * @param ms The deadline.
 * @param what What it is, for the failure message.
 * @returns The promise's value.
 */
export function within<T>(
  promise: Promise<T>,
  ms: number,
  what: string,
): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(new Error(`Deadline: ${what} did not settle within ${ms} ms`)),
      ms,
    );
  });
  return Promise.race([promise, deadline]).finally(() => clearTimeout(timer));
}

/**
 * Waits until `check` returns true, polling, under a deadline.
 *
 * @param check The condition.
 * @param ms The deadline.
 * @param what What is awaited, for the failure message.
 */
export async function until(
  check: () => boolean | Promise<boolean>,
  ms: number,
  what: string,
): Promise<void> {
  const end = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`Deadline: ${what} within ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Whether a process is alive (and not a zombie).
 *
 * @param pid The process.
 * @returns Whether it runs.
 */
export function isAlive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    const state = stat.slice(stat.lastIndexOf(")") + 2).split(" ")[0];
    return state !== "Z" && state !== "X";
  } catch {
    return false;
  }
}

/**
 * The live child processes of this test process.
 *
 * @returns Their pids and command lines.
 */
export function liveChildren(): { pid: number; cmdline: string }[] {
  const own = process.pid;
  const found: { pid: number; cmdline: string }[] = [];
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      if (Number(fields[1]) !== own) continue;
      if (fields[0] === "Z" || fields[0] === "X") continue;
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8")
        .split("\0").join(" ").slice(0, 200);
      found.push({ pid: Number(entry), cmdline });
    } catch {
      // Gone meanwhile.
    }
  }
  return found;
}

/**
 * Registers an `after()` hook that fails the file if any child process is
 * still alive once its tests are done (after a short grace for exits in
 * progress), and kills the survivors.
 */
export function checkNoLeaks(): void {
  after(async () => {
    const end = Date.now() + 3_000;
    let left = liveChildren();
    while (left.length > 0 && Date.now() < end) {
      await new Promise((resolve) => setTimeout(resolve, 25));
      left = liveChildren();
    }
    for (const child of left) {
      try {
        process.kill(child.pid, "SIGKILL");
      } catch {
        // Already gone.
      }
    }
    assert.deepEqual(
      left,
      [],
      "processes outlived the tests that spawned them",
    );
  });
}

/**
 * A test that runs only on one runtime (and is reported as skipped on the
 * other).
 *
 * @param runtime Where it runs.
 * @param name The test's name.
 * @param fn The test.
 */
export function testOn(
  runtime: "deno" | "bun",
  name: string,
  fn: () => Promise<void> | void,
): void {
  if (RUNTIME === runtime) test(name, fn);
  else test(`${name} (${runtime} only)`, { skip: true }, () => {});
}
