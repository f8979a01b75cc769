/**
 * Runtime detection: the only place that asks which runtime this is.
 *
 * Only this runtime's adapter is loaded (a top-level `await` of a dynamic
 * import with a literal specifier, which `deno compile` and Bun's bundler
 * still include): importing airlock on Deno does not load the Bun adapter,
 * nor on Bun the Deno one.
 *
 * @module
 */

import type { RuntimeAdapter, RuntimeName } from "./types.ts";

/**
 * The name of the runtime this code runs on. Bun is checked first (it also
 * provides some Node globals), then Deno.
 *
 * @returns `"bun"` or `"deno"`.
 * @throws {Error} on any other runtime.
 */
export function detectRuntime(): RuntimeName {
  const global = globalThis as { Bun?: unknown; Deno?: unknown };
  if (typeof global.Bun === "object" && global.Bun !== null) return "bun";
  if (typeof global.Deno === "object" && global.Deno !== null) return "deno";
  throw new Error(
    "Cannot run airlock: this runtime is neither Deno nor Bun (Node.js is not supported)",
  );
}

/** This runtime's adapter (`undefined` on any other runtime). */
async function loadOwnAdapter(): Promise<RuntimeAdapter | undefined> {
  const global = globalThis as { Bun?: unknown; Deno?: unknown };
  if (typeof global.Bun === "object" && global.Bun !== null) {
    return (await import("./bun.ts")).bunAdapter;
  }
  if (typeof global.Deno === "object" && global.Deno !== null) {
    return (await import("./deno.ts")).denoAdapter;
  }
  return undefined;
}

const own: RuntimeAdapter | undefined = await loadOwnAdapter();

let replacement: RuntimeAdapter | undefined;

/**
 * The adapter of the runtime this code runs on (or the one installed with
 * {@linkcode replaceAdapter}).
 *
 * @returns The adapter.
 * @throws {Error} on any other runtime.
 */
export function detect(): RuntimeAdapter {
  if (replacement !== undefined) return replacement;
  if (own === undefined) detectRuntime(); // throws: neither Deno nor Bun
  return own as RuntimeAdapter;
}

/**
 * Makes {@linkcode detect} return `adapter` (`undefined`: the runtime's own
 * again). For tests: an in-memory runtime that serves workers without
 * processes (tests/_memory_adapter.ts). Not exported by the package.
 *
 * @param adapter The adapter to use, or `undefined`.
 * @returns The replacement installed before.
 */
export function replaceAdapter(
  adapter: RuntimeAdapter | undefined,
): RuntimeAdapter | undefined {
  const before = replacement;
  replacement = adapter;
  return before;
}
