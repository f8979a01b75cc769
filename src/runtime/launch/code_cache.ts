/**
 * A sandboxed Deno worker's private code cache: its own `DENO_DIR`, so that
 * Deno finds the transpiled modules and V8 code cache of the worker's code
 * from one start to the next (an empty cache costs every start the whole
 * compilation: about 0.28 s against 0.05 s). Workers get it read-only: a
 * worker (its native code, through `ffi`) can write nothing there for a
 * later worker. The parent fills it (before its first worker of the module,
 * once per process: see launch/command.ts) with a warm-up start of the same
 * module that runs with no grant at all (no `read`, `write`, `net`, `env`,
 * `run`, `ffi`, no environment, no setup, serving no call) but with the
 * cache writable: Deno writes its own caches without JavaScript permissions,
 * so the only thing the warm-up can leave there is what Deno compiles of the
 * code it can load without grants. One cache per runtime binary, module,
 * entry and config (grants and environment do not change what is compiled).
 * Deno's module caches (`remote`, `npm`) are reached through links to the
 * parent's, mounted read-only by the sandbox; web storage (`location_data`)
 * is a private tmpfs inside bubblewrap and read-only without it.
 *
 * @module
 */

import {
  createHash,
  existsSync,
  join,
  lstatSync,
  mkdirSync,
  readdirSync,
  readlinkSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "../node_builtins.ts";

/** The subdirectory of the parent's `DENO_DIR` holding the private caches. */
export const CODE_CACHE_DIR = "airlock-code";

/** Deno's module caches, linked into every private cache. */
const SHARED = ["remote", "npm"] as const;

/** Where Deno keeps web storage (`localStorage`, the Cache API) under `DENO_DIR`. */
export const LOCATION_DATA = "location_data";

/** The file the parent writes into a cache once its warm-up has run. */
export const WARM_MARK = "airlock-warmed";

/** What a worker's compiled code depends on. */
export interface CodeCacheKey {
  /** The runtime binary (real path). */
  binary: string;
  /** The worker module's URL (or the program's entry under self-exec). */
  module: string;
  /** airlock's worker entry. */
  entry: string;
  /** The Deno config, if any. */
  config: string | undefined;
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
 * import assert from "node:assert/strict";
 *
 * const key = {
 *   binary: "/opt/deno",
 *   module: "file:///app/w.ts",
 *   entry: "file:///airlock/workers/entry.ts",
 *   config: undefined,
 * };
 * const dir = codeCacheDir("/home/ada/.cache/deno", key);
 * assert.match(dir, /^\/home\/ada\/\.cache\/deno\/airlock-code\/[0-9a-f]{32}$/);
 * const other = codeCacheDir("/home/ada/.cache/deno", {
 *   ...key,
 *   module: "file:///app/other.ts",
 * });
 * assert.notEqual(other, dir);
 * ```
 */
export function codeCacheDir(parentDenoDir: string, key: CodeCacheKey): string {
  const hash = createHash("sha256").update(JSON.stringify([
    "read-only",
    key.binary,
    key.module,
    key.entry,
    key.config ?? null,
  ])).digest("hex").slice(0, 32);
  return join(parentDenoDir, CODE_CACHE_DIR, hash);
}

/**
 * Creates (or repairs) a private cache directory: mode 0700, with `remote`
 * and `npm` linked to the parent's module caches, and an empty web storage
 * directory (bubblewrap mounts a private tmpfs over it, which needs it to
 * exist in the read-only cache; it must never hold anything).
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
  const location = join(dir, LOCATION_DATA);
  let directory = false;
  try {
    directory = lstatSync(location).isDirectory();
  } catch {
    directory = false;
  }
  // Never removed while it is a directory: a running worker's bubblewrap
  // may have its tmpfs mounted there.
  if (!directory) {
    rmSync(location, { recursive: true, force: true });
    mkdirSync(location, { mode: 0o700 });
  }
}

/**
 * Empties the web storage directory (after the warm-up, which may write it
 * where no tmpfs covers it: Landlock without bubblewrap).
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 */
export function clearLocationData(dir: string): void {
  const location = join(dir, LOCATION_DATA);
  // Its entries only: the directory itself may be a mount point.
  for (const name of readdirSync(location)) {
    rmSync(join(location, name), { recursive: true, force: true });
  }
}

/**
 * Whether the cache's warm-up has run (by this or an earlier process).
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 * @returns `true` once {@linkcode markWarm} was called for it.
 */
export function isWarm(dir: string): boolean {
  return existsSync(join(dir, WARM_MARK));
}

/**
 * Records that the cache's warm-up has run, so that no later start (of this
 * or a later process) runs it again.
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 */
export function markWarm(dir: string): void {
  writeFileSync(join(dir, WARM_MARK), "");
}
