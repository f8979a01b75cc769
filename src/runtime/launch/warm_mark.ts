/**
 * The warm mark of a sandboxed Deno worker's private code cache
 * (code_cache.ts): written by the parent after a warm-up
 * (launch/warm_up.ts), it records the identity of every local source the
 * warm-up compiled, so that a later process skips the warm-up start while
 * none of them changed (issue 23 item 2). It decides only whether a warm-up
 * runs: a wrong mark costs speed, never confinement (without a warm-up a
 * worker compiles in memory what does not match its cache; what keeps
 * planted code out of the cache is that no worker may write it: Deno's
 * source and emit hashes are no check against a writer, who can compute
 * them), and it is read only when the cache directory and the mark are
 * this user's, writable by no one else and no link.
 *
 * @module
 */

import {
  existsSync,
  join,
  lstatSync,
  process,
  readdirSync,
  statSync,
} from "../node_builtins.ts";
import { replaceFile } from "./code_cache.ts";
import { readPrivateFile } from "../private_file.ts";

/** The file the parent writes into a cache once its warm-up has run. */
export const WARM_MARK = "airlock-warmed";

/**
 * Whether the cache's warm-up has run (by this or an earlier process).
 *
 * @param dir The directory, from `codeCacheDir` (code_cache.ts).
 * @returns `true` once {@linkcode markWarm} was called for it.
 */
export function isWarm(dir: string): boolean {
  return existsSync(join(dir, WARM_MARK));
}

/** The version of the warm mark's format (an older mark is empty). */
const MARK_VERSION = 1;

/** A mark longer than this is not read (one holds ~100 bytes a source). */
const MAX_MARK_BYTES = 1024 * 1024;

/** At most this many sources are recorded (past it: no mark is current). */
const MAX_MARK_SOURCES = 10_000;

/**
 * A source changed this close before the warm-up began, or after, is
 * recorded as unsettled (never current): file times tick coarsely, so an
 * edit just after the warm-up read a file could leave the time the mark
 * then records.
 */
const TICK_MARGIN_MS = 50;

/** What a mark records for a source that may have changed during the warm-up. */
const UNSETTLED = "unsettled";

/**
 * A source's identity: device, inode, size and modification time (ms, a
 * whole number: Deno's and Bun's `node:fs` agree on it); `-` when missing,
 * `+` when not a regular file. Not the change time: hard links made or
 * removed change it (`cp -al`, pnpm's store), which would cost a warm-up
 * for nothing; an edit changes the modification time, a rewrite the inode.
 *
 * @param path An absolute path.
 * @returns The identity, and its modification time (ms) when it is a file.
 */
function sourceIdentity(path: string): { id: string; mtimeMs?: number } {
  try {
    const stat = statSync(path);
    if (!stat.isFile()) return { id: "+" };
    const mtimeMs = Math.floor(stat.mtimeMs);
    return { id: `${stat.dev}:${stat.ino}:${stat.size}:${mtimeMs}`, mtimeMs };
  } catch {
    return { id: "-" };
  }
}

/**
 * The local sources Deno compiled into the cache: its `gen/file/` tree
 * mirrors the path of every local module it transpiled (`gen/file/app/w.ts.js`
 * for `/app/w.ts`). Only those that exist now (the tree keeps what is gone).
 */
function compiledSources(dir: string): string[] {
  const found: string[] = [];
  const walk = (path: string, source: string): void => {
    let entries: { name: string; isDirectory(): boolean; isFile(): boolean }[];
    try {
      entries = readdirSync(path, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (found.length > MAX_MARK_SOURCES) return;
      const inner = join(path, entry.name);
      if (entry.isDirectory()) walk(inner, `${source}/${entry.name}`);
      else if (entry.isFile() && entry.name.endsWith(".js")) {
        const file = `${source}/${entry.name.slice(0, -3)}`;
        if (sourceIdentity(file).mtimeMs !== undefined) found.push(file);
      }
    }
  };
  walk(join(dir, "gen", "file"), "");
  return found;
}

/** This process's effective uid (`undefined` where there is none). */
function euid(): number | undefined {
  try {
    return process.effectiveUid();
  } catch {
    return undefined;
  }
}

/** Whether `path` is this user's, no link, and writable by no one else. */
function ownPrivate(path: string, directory: boolean): boolean {
  const uid = euid();
  try {
    const stat = lstatSync(path);
    return uid !== undefined && stat.uid === uid &&
      (stat.mode & 0o022) === 0 &&
      (directory ? stat.isDirectory() : stat.isFile());
  } catch {
    return false;
  }
}

/**
 * Records that the cache's warm-up has run, so that no later start (of this
 * or a later process) runs it again while nothing it compiled changed: the
 * mark holds the identity (device, inode, size, times) of every local
 * source in the cache's `gen/file/` tree and of `sources` (the runtime
 * binary, the module, its project's config), each recorded as unsettled
 * (never current) when modified after `since` (minus a clock tick). Written beside and
 * renamed over the old one, mode 0600, never through a link.
 *
 * @param dir The directory, from `codeCacheDir` (code_cache.ts).
 * @param sources What else the compiled code depends on (absolute paths).
 * @param since When the warm-up began (ms since the epoch).
 * @throws When it cannot be written (a later process warms up again).
 */
export function markWarm(
  dir: string,
  sources: readonly string[],
  since: number,
): void {
  const files: Record<string, string> = {};
  for (const path of new Set([...sources, ...compiledSources(dir)])) {
    const { id, mtimeMs } = sourceIdentity(path);
    files[path] = mtimeMs !== undefined && mtimeMs >= since - TICK_MARGIN_MS
      ? UNSETTLED
      : id;
  }
  replaceFile(
    join(dir, WARM_MARK),
    JSON.stringify({ version: MARK_VERSION, files }),
  );
}

/**
 * Whether the cache's warm mark says that nothing its warm-up compiled has
 * changed since: every source it records (and each of `sources`) has the
 * identity recorded. Then no warm-up is needed; a wrong answer costs speed
 * only (Deno checks every cached module against its source's hash, and
 * compiles again what changed), never confinement: the mark decides only
 * whether a warm-up runs. A mark (or cache directory) that is not this
 * user's, writable by others, a link, too long or malformed is not current.
 *
 * @param dir The directory, from `codeCacheDir` (code_cache.ts).
 * @param sources What else the compiled code depends on (absolute paths).
 * @returns `true` when the warm-up may be skipped.
 */
export function warmMarkCurrent(
  dir: string,
  sources: readonly string[],
): boolean {
  const uid = euid();
  if (uid === undefined || !ownPrivate(dir, true)) return false;
  // Opened once, no link followed, checked and read through that
  // descriptor: a mark swapped for a FIFO or a link to /dev/zero after a
  // check by path would hold or fill the parent.
  const text = readPrivateFile(join(dir, WARM_MARK), MAX_MARK_BYTES, uid);
  if (text === undefined) return false;
  let files: unknown;
  try {
    const parsed = JSON.parse(text) as {
      version?: unknown;
      files?: unknown;
    };
    if (parsed.version !== MARK_VERSION) return false;
    files = parsed.files;
  } catch {
    return false;
  }
  if (typeof files !== "object" || files === null || Array.isArray(files)) {
    return false;
  }
  const recorded = files as Record<string, unknown>;
  const paths = Object.keys(recorded);
  if (paths.length === 0 || paths.length > MAX_MARK_SOURCES) return false;
  if (sources.some((path) => !Object.hasOwn(recorded, path))) return false;
  return paths.every((path) =>
    typeof recorded[path] === "string" && recorded[path] !== UNSETTLED &&
    sourceIdentity(path).id === recorded[path]
  );
}
