/**
 * The runtime running the tests, and tests that run on one runtime only.
 *
 * @module
 */

import { test } from "node:test";
import "./deno_dir.ts";

/** The runtime running the tests. */
export const RUNTIME: "deno" | "bun" =
  typeof (globalThis as { Bun?: unknown }).Bun === "object" ? "bun" : "deno";

/**
 * The arguments that run a script with this runtime's binary
 * (`process.execPath`): as it is on Bun, with every permission on Deno.
 *
 * @param script The script's path.
 * @param args Its arguments.
 * @returns The arguments, the binary not included.
 */
export function scriptArgs(script: string, ...args: string[]): string[] {
  return RUNTIME === "bun"
    ? [script, ...args]
    : ["run", "-A", "--quiet", script, ...args];
}

/** The other runtime. */
export const OTHER_RUNTIME: "deno" | "bun" = RUNTIME === "bun" ? "deno" : "bun";

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
