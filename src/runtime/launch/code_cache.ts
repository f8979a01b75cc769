/**
 * A sandboxed Deno worker's private code cache: its own `DENO_DIR`, so that
 * Deno finds the transpiled modules and V8 code cache of the worker's code
 * from one start to the next (an empty cache costs every start the whole
 * compilation: about 0.28 s against 0.05 s). Workers get it read-only: a
 * worker (its native code, through `ffi`) can write nothing there for a
 * later worker. The parent fills it (before its first worker of the module,
 * once per process and only when its warm mark is not current: warm_mark.ts,
 * launch/warm_up.ts) with a warm-up start of the same
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
 * The caches stay bounded: each process touches a mark (`airlock-used`) in
 * the caches it uses and prunes (once, in the background, and only when no
 * process did in the last {@linkcode PRUNE_EVERY_MS}) the caches
 * unused for {@linkcode CODE_CACHE_MAX_AGE_MS} and, beyond the
 * {@linkcode CODE_CACHE_MAX_ENTRIES} most recently used, those unused for
 * {@linkcode CODE_CACHE_GRACE_MS}; never one this process uses.
 *
 * @module
 */

import {
  join,
  lstat,
  lstatSync,
  mkdirSync,
  process,
  readdir,
  readdirSync,
  readlinkSync,
  renameSync,
  rm,
  rmSync,
  symlinkSync,
  writeFileSync,
} from "../node_builtins.ts";
import { sha256Hex } from "../sha256.ts";
import { readPrivateFile } from "../private_file.ts";

/** The subdirectory of the parent's `DENO_DIR` holding the private caches. */
export const CODE_CACHE_DIR = "airlock-code";

/** Deno's module caches, linked into every private cache. */
const SHARED = ["remote", "npm"] as const;

/** Where Deno keeps web storage (`localStorage`, the Cache API) under `DENO_DIR`. */
export const LOCATION_DATA = "location_data";

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
  const hash = sha256Hex(JSON.stringify([
    "read-only",
    key.binary,
    key.module,
    key.entry,
    key.config ?? null,
  ])).slice(0, 32);
  return join(parentDenoDir, CODE_CACHE_DIR, hash);
}

/** Where `path` links to, `"(not a link)"`, or `undefined` when missing. */
function linkOf(path: string): string | undefined {
  try {
    return lstatSync(path).isSymbolicLink()
      ? readlinkSync(path)
      : "(not a link)";
  } catch {
    return undefined;
  }
}

/** Whether `path` is a directory (not a link to one). */
function isDirectory(path: string): boolean {
  try {
    return lstatSync(path).isDirectory();
  } catch {
    return false;
  }
}

/**
 * Creates (or repairs) a private cache directory: mode 0700, with `remote`
 * and `npm` linked to the parent's module caches, and an empty web storage
 * directory (bubblewrap mounts a private tmpfs over it, which needs it to
 * exist in the read-only cache; it must never hold anything).
 *
 * Safe against concurrent starts of the same module, in this process or
 * others: nothing that is already right is removed (the web storage
 * directory, once a directory, never is: another start's bubblewrap may be
 * about to mount its tmpfs there), a link is made beside its place and
 * renamed over it, and what another process made meanwhile counts as done.
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 * @param parentDenoDir The parent's Deno cache directory.
 * @throws When the directory cannot be made right.
 */
export function prepareCodeCache(dir: string, parentDenoDir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  for (const name of SHARED) {
    const link = join(dir, name);
    const target = join(parentDenoDir, name);
    const current = linkOf(link);
    if (current === target) continue;
    // A directory or file in its place (never made by airlock): removed.
    if (current === "(not a link)") {
      rmSync(link, { recursive: true, force: true });
    }
    const temporary = `${link}.${crypto.randomUUID()}`;
    symlinkSync(target, temporary);
    try {
      renameSync(temporary, link);
    } catch (error) {
      rmSync(temporary, { force: true });
      if (linkOf(link) !== target) throw error;
    }
  }
  const location = join(dir, LOCATION_DATA);
  // Never removed in place: Deno's rmSync and unlinkSync remove an empty
  // directory too, so a start that removed what it took for a stray file
  // took the directory a racing start had just made (which then failed to
  // mount its tmpfs there). mkdir(2) makes it or fails, never replacing.
  for (let attempt = 0; attempt < 3; attempt++) {
    if (isDirectory(location)) return;
    try {
      mkdirSync(location, { mode: 0o700 });
      return;
    } catch (error) {
      if (isDirectory(location)) return;
      if (linkOf(location) === undefined) throw error;
    }
    // A file or a link in its place (never made by airlock): moved aside,
    // then removed; had a racing start put its directory there meanwhile,
    // that is moved back.
    const stale = join(dir, `${LOCATION_DATA}.${crypto.randomUUID()}`);
    try {
      renameSync(location, stale);
    } catch {
      continue; // moved by a racing start
    }
    if (isDirectory(stale)) {
      try {
        renameSync(stale, location);
      } catch {
        // A directory there again: this one is not needed.
      }
    }
    rmSync(stale, { recursive: true, force: true });
  }
  if (!isDirectory(location)) {
    throw new Error(
      `Cannot prepare the code cache: ${location} keeps being replaced by something that is not a directory`,
    );
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
 * Writes a mark file: a new file beside it (`O_EXCL`, mode 0600) renamed
 * over it, so that a link planted in its place is replaced, never written
 * through (a `writeFileSync` to the mark's path would truncate whatever file
 * the link names).
 *
 * @param path The mark's path.
 * @param text What it holds.
 * @throws When it cannot be written.
 */
export function replaceFile(path: string, text: string): void {
  const temporary = `${path}.${crypto.randomUUID()}`;
  writeFileSync(temporary, text, { flag: "wx", mode: 0o600 });
  try {
    renameSync(temporary, path);
  } catch (error: unknown) {
    rmSync(temporary, { force: true });
    throw error;
  }
}

/**
 * The file the parent writes into a cache when its warm-up ran past its
 * timeout (warm_up.ts, `WARM_UP_TIMEOUT_MS`: a module that hangs or works
 * long at import): when, in ms since the epoch.
 */
export const STUCK_MARK = "airlock-warm-up-stuck";

/**
 * After a warm-up ran past its timeout, the cache's warm-ups are skipped this
 * long (by every process): its workers start at once, without the warmed
 * cache, instead of each process's first start waiting the whole timeout
 * again.
 */
export const STUCK_RETRY_MS = 60 * 60 * 1000;

/**
 * Records that the cache's warm-up ran past its timeout.
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 * @param now The time to record (ms since the epoch).
 */
export function markWarmUpStuck(dir: string, now: number = Date.now()): void {
  try {
    replaceFile(join(dir, STUCK_MARK), String(now));
  } catch {
    // Not recorded: a later process tries the warm-up again.
  }
}

/**
 * Whether the cache's warm-up ran past its timeout less than
 * {@linkcode STUCK_RETRY_MS} ago.
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 * @param now The current time (ms since the epoch).
 * @returns `true` while its warm-ups are to be skipped.
 */
export function warmUpStuckRecently(
  dir: string,
  now: number = Date.now(),
): boolean {
  let uid: number | undefined;
  try {
    uid = process.effectiveUid();
  } catch {
    return false;
  }
  if (uid === undefined) return false;
  // Opened once, no link followed, never blocking (a FIFO planted in its
  // place held the start's warm-up for ever), and bounded.
  const text = readPrivateFile(join(dir, STUCK_MARK), 64, uid);
  if (text === undefined) return false;
  const at = Number(text);
  return Number.isFinite(at) && now >= at && now - at < STUCK_RETRY_MS;
}

/** The file whose modification time says when a process last used a cache. */
export const USED_MARK = "airlock-used";

/** At most this many caches are kept (the most recently used ones). */
export const CODE_CACHE_MAX_ENTRIES = 64;

/** A cache unused this long is removed whatever the count. */
export const CODE_CACHE_MAX_AGE_MS = 30 * 24 * 60 * 60 * 1000;

/**
 * A cache used this recently is never removed (another process may be
 * starting or running workers with it).
 */
export const CODE_CACHE_GRACE_MS = 10 * 60 * 1000;

/**
 * A process removes at most this many caches (the least recently used
 * first), so that pruning a cache grown large never holds a short-lived
 * parent's exit for long; later processes remove the rest.
 */
export const CODE_CACHE_MAX_REMOVALS = 32;

/** How often a process refreshes the mark of a cache it keeps using. */
const TOUCH_EVERY_MS = 60 * 1000;

/** The caches this process used, with when it last touched their mark. */
const used = new Map<string, number>();

/** Cache roots this process pruned (or is pruning). */
const pruned = new Set<string>();

/**
 * Records that this process uses a cache (its workers read it): it is never
 * pruned by this process, and its mark tells other processes it is in use
 * (refreshed at most once a minute).
 *
 * @param dir The directory, from {@linkcode codeCacheDir}.
 */
export function touchCodeCache(dir: string): void {
  const now = Date.now();
  const last = used.get(dir);
  if (last !== undefined && now - last < TOUCH_EVERY_MS) return;
  used.set(dir, now);
  try {
    replaceFile(join(dir, USED_MARK), String(now));
  } catch {
    // Not recorded: the directory's own time stands in for it.
  }
}

/** How {@linkcode pruneCodeCaches} chooses. */
export interface PruneOptions {
  /** How many caches to keep at most. Default {@linkcode CODE_CACHE_MAX_ENTRIES}. */
  maxEntries?: number;
  /** Removes caches unused this long. Default {@linkcode CODE_CACHE_MAX_AGE_MS}. */
  maxAgeMs?: number;
  /** Keeps caches used this recently. Default {@linkcode CODE_CACHE_GRACE_MS}. */
  graceMs?: number;
  /** Whether a cache is in use (never removed). Default: used by this process. */
  inUse?: (dir: string) => boolean;
  /** The time to count from (ms since the epoch). Default: now. */
  now?: number;
  /** Removes at most this many. Default {@linkcode CODE_CACHE_MAX_REMOVALS}. */
  maxRemovals?: number;
}

/**
 * Removes the private caches under `root` (`<DENO_DIR>/airlock-code`) that
 * are not in use and either unused for `maxAgeMs`, or beyond the
 * `maxEntries` most recently used (the ones in use count) and unused for
 * `graceMs`, the least recently used first and at most `maxRemovals`. Only
 * directories named like a key are considered; the links
 * to Deno's module caches inside are removed, never followed.
 *
 * @param root The directory holding the caches.
 * @param options What to keep.
 * @returns The directories removed.
 */
export async function pruneCodeCaches(
  root: string,
  options: PruneOptions = {},
): Promise<string[]> {
  const maxEntries = options.maxEntries ?? CODE_CACHE_MAX_ENTRIES;
  const maxAgeMs = options.maxAgeMs ?? CODE_CACHE_MAX_AGE_MS;
  const graceMs = options.graceMs ?? CODE_CACHE_GRACE_MS;
  const inUse = options.inUse ?? ((dir: string) => used.has(dir));
  const now = options.now ?? Date.now();
  const maxRemovals = options.maxRemovals ?? CODE_CACHE_MAX_REMOVALS;
  let names: string[];
  try {
    names = await readdir(root);
  } catch {
    return [];
  }
  const entries: { dir: string; usedAt: number; inUse: boolean }[] = [];
  for (const name of names) {
    if (!/^[0-9a-f]{32}$/.test(name)) continue;
    const dir = join(root, name);
    let usedAt: number;
    try {
      const stat = await lstat(dir);
      if (!stat.isDirectory()) continue;
      usedAt = stat.mtimeMs;
    } catch {
      continue;
    }
    try {
      usedAt = Math.max(usedAt, (await lstat(join(dir, USED_MARK))).mtimeMs);
    } catch {
      // Never marked (made before the marks): the directory's time.
    }
    entries.push({ dir, usedAt, inUse: inUse(dir) });
  }
  // Most recently used first; the ones in use take their places.
  entries.sort((a, b) =>
    Number(b.inUse) - Number(a.inUse) || b.usedAt - a.usedAt
  );
  const removed: string[] = [];
  // The least recently used first, up to maxRemovals.
  for (let index = entries.length - 1; index >= 0; index--) {
    if (removed.length >= maxRemovals) break;
    const entry = entries[index] as (typeof entries)[number];
    const idle = now - entry.usedAt;
    const remove = idle > maxAgeMs || (index >= maxEntries && idle > graceMs);
    // Asked again just before: a start may have taken it meanwhile.
    if (!remove || entry.inUse || inUse(entry.dir)) continue;
    // And its mark read again: another process may have started using it
    // since it was read (it touches the mark before its first start).
    try {
      if ((await lstat(join(entry.dir, USED_MARK))).mtimeMs > entry.usedAt) {
        continue;
      }
    } catch {
      // No mark: as read before.
    }
    try {
      await rm(entry.dir, { recursive: true, force: true });
      removed.push(entry.dir);
    } catch {
      // Left for a later process.
    }
  }
  return removed;
}

/**
 * The file (in the directory holding the caches) whose modification time
 * says when a process last pruned them.
 */
export const PRUNED_MARK = "airlock-pruned";

/**
 * The caches are pruned at most this often, by all processes together: a
 * prune reads every cache's marks (~20 ms of a Deno CLI's CPU at 64 caches).
 */
export const PRUNE_EVERY_MS = CODE_CACHE_GRACE_MS;

/**
 * Whether the caches under `root` were pruned less than
 * {@linkcode PRUNE_EVERY_MS} ago; when not, records that they are being
 * pruned now. A mark someone else wrote can only delay pruning (the caches
 * grow, they are never used the more for it).
 *
 * @param root The directory holding the caches.
 * @param now The current time (ms since the epoch).
 * @returns `true` when no prune is due.
 */
export async function prunedRecently(
  root: string,
  now: number = Date.now(),
): Promise<boolean> {
  const mark = join(root, PRUNED_MARK);
  try {
    const stat = await lstat(mark);
    const at = stat.mtimeMs;
    if (stat.isFile() && now >= at && now - at < PRUNE_EVERY_MS) return true;
  } catch {
    // Never pruned, or gone: due.
  }
  try {
    replaceFile(mark, String(now));
  } catch {
    // Not recorded: the next process prunes again.
  }
  return false;
}

/**
 * Prunes the caches beside `dir` in the background, once per process and
 * at most once per {@linkcode PRUNE_EVERY_MS} on the machine (see
 * {@linkcode pruneCodeCaches}).
 *
 * @param dir A cache directory, from {@linkcode codeCacheDir}.
 */
export function pruneCodeCachesOnce(dir: string): void {
  const root = join(dir, "..");
  if (pruned.has(root)) return;
  pruned.add(root);
  prunedRecently(root).then((recently) =>
    recently ? undefined : pruneCodeCaches(root)
  ).catch(() => {});
}
