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

/**
 * The adapter of the runtime this code runs on.
 *
 * @returns The adapter.
 * @throws {Error} on any other runtime.
 */
export function detect(): RuntimeAdapter {
  return detectRuntime() === "bun" ? bunAdapter : denoAdapter;
}
