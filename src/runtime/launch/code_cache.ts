/**
 * A sandboxed Deno worker's private, writable code cache: its own
 * `DENO_DIR`, so that Deno keeps the transpiled modules and V8 code cache
 * from one start to the next (a read-only or hidden cache costs every start
 * the whole compilation), without sharing a writable cache between workers
 * of different modules or grants. The directory is keyed by what decides
 * the worker's code and privileges (runtime binary, module, entry, config,
 * permissions); a worker can only ever poison the cache of workers exactly
 * like itself. Deno's module caches (`remote`, `npm`) are reached through
 * links to the parent's, mounted read-only by the sandbox; web storage
 * (`location_data`) is kept out of it.
 *
 * @module
 */

import {
  createHash,
  join,
  lstatSync,
  mkdirSync,
  readlinkSync,
  rmSync,
  symlinkSync,
} from "../node_builtins.ts";
import type { ResolvedPermissions } from "../permissions.ts";

/** The subdirectory of the parent's `DENO_DIR` holding the private caches. */
export const CODE_CACHE_DIR = "airlock-code";

/** Deno's module caches, linked into every private cache. */
const SHARED = ["remote", "npm"] as const;

/** Where Deno keeps web storage (`localStorage`, the Cache API) under `DENO_DIR`. */
export const LOCATION_DATA = "location_data";

/** What a worker's code and privileges depend on. */
export interface CodeCacheKey {
  /** The runtime binary (real path). */
  binary: string;
  /** The worker module's URL (or the program's entry under self-exec). */
  module: string;
  /** airlock's worker entry. */
  entry: string;
  /** The Deno config, if any. */
  config: string | undefined;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
}

/**
 * The private cache directory of a worker: `<parent DENO_DIR>/airlock-code/<key>`,
 * the key a hash of {@linkcode CodeCacheKey}.
 *
 * @param parentDenoDir The parent's Deno cache directory.
 * @param key What the worker's code and privileges depend on.
 * @returns The directory's path (not created).
 *
 * @example
 * ```ts
 * import { codeCacheDir } from "./code_cache.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const key = {
 *   binary: "/opt/deno",
 *   module: "file:///app/w.ts",
 *   entry: "file:///airlock/workers/entry.ts",
 *   config: undefined,
 *   permissions: resolvePermissions(undefined, "/app"),
 * };
 * const dir = codeCacheDir("/home/ada/.cache/deno", key);
 * assert.match(dir, /^\/home\/ada\/\.cache\/deno\/airlock-code\/[0-9a-f]{32}$/);
 * const other = codeCacheDir("/home/ada/.cache/deno", {
 *   ...key,
 *   permissions: resolvePermissions({ read: true }, "/app"),
 * });
 * assert.notEqual(other, dir);
 * ```
 */
export function codeCacheDir(parentDenoDir: string, key: CodeCacheKey): string {
  const hash = createHash("sha256").update(JSON.stringify([
    key.binary,
    key.module,
    key.entry,
    key.config ?? null,
    key.permissions,
  ])).digest("hex").slice(0, 32);
  return join(parentDenoDir, CODE_CACHE_DIR, hash);
}

/**
 * Creates (or repairs) a private cache directory: mode 0700, with `remote`
 * and `npm` linked to the parent's module caches, and web storage removed
 * (it must not outlive a worker; inside bubblewrap it is a private tmpfs
 * anyway).
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 * @param parentDenoDir The parent's Deno cache directory.
 */
export function prepareCodeCache(dir: string, parentDenoDir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const name of SHARED) {
    const link = join(dir, name);
    const target = join(parentDenoDir, name);
    let current: string | undefined;
    try {
      current = lstatSync(link).isSymbolicLink()
        ? readlinkSync(link)
        : "(not a link)";
    } catch {
      current = undefined;
    }
    if (current === target) continue;
    if (current !== undefined) rmSync(link, { recursive: true, force: true });
    symlinkSync(target, link);
  }
  rmSync(join(dir, LOCATION_DATA), { recursive: true, force: true });
}
