/**
 * Runtime detection: the only place that asks which runtime this is.
 *
 * @module
 */

import { bunAdapter } from "./bun.ts";
import { denoAdapter } from "./deno.ts";
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

let replacement: RuntimeAdapter | undefined;

/**
 * The adapter of the runtime this code runs on (or the one installed with
 * {@linkcode replaceAdapter}).
 *
 * @returns The adapter.
 * @throws {Error} on any other runtime.
 */
export function detect(): RuntimeAdapter {
  return replacement ??
    (detectRuntime() === "bun" ? bunAdapter : denoAdapter);
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
