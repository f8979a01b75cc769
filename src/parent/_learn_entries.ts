/**
 * Learn mode's suggestion as entries, one kind and scope each: from the
 * audit's suggestion, from the paths the calls name, from the reads a
 * sandboxed run's audit recorded; and back to a `permissions` object.
 *
 * @module
 */

import {
  dirname,
  existsSync,
  isAbsolute,
  join,
  statSync,
} from "../runtime/node_builtins.ts";
import { PERMISSION_KINDS, type Permissions } from "../runtime/permissions.ts";
import { packageDir, permissionsFromAudit, shorten } from "./learn_audit.ts";

/** One entry of a suggestion: a kind and one scope of it. */
export type Entry = { permission: string; value: string };

/** Kinds whose scopes are paths. */
export const PATH_KINDS: ReadonlySet<string> = new Set([
  "read",
  "write",
  "run",
  "ffi",
]);

/** Kinds step 3 tries to remove first: each reaches beyond one file. */
export const WIDE_KINDS: ReadonlySet<string> = new Set(["sys", "net", "run"]);

/**
 * Where the audit's `write` entries are not taken: Deno checks write access
 * beside many reads (a plain `readTextFileSync` records both), and a write
 * grant on code (a package, the runtime, system directories) would turn the
 * Landlock step off for the rest of this process (tamper protection). A
 * write the calls really need there comes back as a refusal in step 2.
 */
function codePath(path: string): boolean {
  return path.includes("/node_modules/") || path.endsWith("/node_modules") ||
    /^\/(?:proc|sys|dev|usr|lib|lib32|lib64|bin|sbin|etc|opt|nix)(?:\/|$)/
      .test(path);
}

export function entriesOf(permissions: Permissions, cwd: string): Entry[] {
  const entries: Entry[] = [];
  for (const kind of PERMISSION_KINDS) {
    // A variable given in `env` is readable without a grant and one not
    // given is absent (deno_command.ts): an env grant is never needed.
    if (kind === "env") continue;
    const scopes = permissions[kind];
    if (!Array.isArray(scopes)) continue;
    for (const scope of scopes) {
      const value = String(scope);
      if (kind === "write" && codePath(value)) continue;
      // The worker's own /proc entries are its own (the sandbox shows them);
      // a grant names the parent's, which bubblewrap cannot mount.
      if (/^\/proc\/(?:self|thread-self)(?:\/|$)/.test(value)) continue;
      const kept = PATH_KINDS.has(kind)
        ? existingDir(packageDir(value), cwd)
        : value;
      if (!entries.some((e) => e.permission === kind && e.value === kept)) {
        entries.push({ permission: kind, value: kept });
      }
    }
  }
  // A path inside another entry of its kind is granted with it: one entry
  // fewer to try, and no grant on a file the calls delete again (a grant
  // on a missing path where a worker may write is refused at start).
  const inside = (entry: Entry) => {
    if (!PATH_KINDS.has(entry.permission)) return false;
    const path = resolveIn(entry.value, cwd);
    return entries.some((other) =>
      other !== entry && other.permission === entry.permission &&
      path.startsWith(`${resolveIn(other.value, cwd)}/`)
    );
  };
  return entries.filter((entry) => !inside(entry));
}

export function permissionsOf(
  entries: readonly Entry[],
  all: Set<string>,
): Permissions {
  const permissions: Permissions = {};
  for (const kind of PERMISSION_KINDS) {
    if (all.has(kind)) {
      permissions[kind] = true;
      continue;
    }
    const values = entries.filter((e) => e.permission === kind).map((e) =>
      e.value
    );
    if (values.length > 0) permissions[kind] = values;
  }
  return permissions;
}

/**
 * Read and write grants on what the calls' string arguments name, as the
 * worker resolves them against `cwd`: an existing directory itself, else
 * the directory a file is in or will be created in (with the siblings a
 * database makes beside it). Only paths whose directory exists.
 */
export function dataGrants(
  calls: readonly (readonly [op: string, ...args: unknown[]])[],
  cwd: string,
): Entry[] {
  const found: Entry[] = [];
  const add = (permission: string, value: string) => {
    if (!found.some((e) => e.permission === permission && e.value === value)) {
      found.push({ permission, value });
    }
  };
  for (const [, ...args] of calls) {
    for (const arg of args) {
      if (typeof arg !== "string" || arg === "" || arg.includes("\0")) continue;
      if (
        !arg.startsWith("/") && !arg.startsWith("./") && !arg.startsWith("../")
      ) {
        continue;
      }
      const absolute = isAbsolute(arg) ? arg : join(cwd, arg);
      let dir: string | undefined;
      try {
        dir = statSync(absolute).isDirectory() ? absolute : dirname(absolute);
      } catch {
        try {
          if (statSync(dirname(absolute)).isDirectory()) {
            dir = dirname(absolute);
          }
        } catch {
          // Nowhere to grant.
        }
      }
      if (dir === undefined || codePath(dir) || dir === "/") continue;
      const scope = shorten(dir, cwd);
      add("read", scope === "./" ? "." : scope);
      add("write", scope === "./" ? "." : scope);
    }
  }
  return found;
}

/**
 * Whether nothing is at a path (a Deno parent without `-A` may not even
 * ask about `/proc/self/exe`: then it counts as there).
 */
export function missing(path: string): boolean {
  try {
    return !existsSync(path);
  } catch {
    return false;
  }
}

/**
 * A path that no longer exists as the directory it was in (a file the
 * calls made and deleted again: a grant on a missing path is skipped at
 * start, so what the calls need is the directory); the path itself where
 * that directory is code or `/` (a loader probing for a missing package).
 */
function existingDir(value: string, cwd: string): string {
  let path = resolveIn(value, cwd);
  if (!missing(path)) return value;
  while (missing(path)) {
    const up = dirname(path);
    if (up === path) return value;
    path = up;
  }
  if (path === "/" || codePath(path)) return value;
  return path === cwd ? "." : shorten(path, cwd);
}

export function entryKey(entry: Entry): string {
  return `${entry.permission}\0${entry.value}`;
}

/** A path the audit recorded, absolute (relative ones are the worker's). */
export function resolveIn(value: string, cwd: string): string {
  return isAbsolute(value) ? value : join(cwd, value);
}

/**
 * The reads a sandboxed run's audit recorded that no entry grants (Deno
 * refused them) and that were not tried before (`tried`, the unconfined
 * run's accesses among them): a library's fallback after a refusal it
 * swallowed. Marks them tried.
 */
export function fallbackReads(
  audit: readonly string[],
  entries: readonly Entry[],
  tried: Set<string>,
  cwd: string,
): Entry[] {
  const granted = entries.filter((e) => e.permission === "read").map((e) =>
    resolveIn(e.value, cwd)
  );
  const found: Entry[] = [];
  for (
    const access of permissionsFromAudit(audit.join("\n"), cwd, []).accesses
  ) {
    if (access.permission !== "read") continue;
    const path = resolveIn(access.value, cwd);
    const key = `read\0${path}`;
    if (tried.has(key)) continue;
    tried.add(key);
    if (/^\/proc\/(?:self|thread-self)(?:\/|$)/.test(path)) continue;
    if (granted.some((g) => path === g || path.startsWith(`${g}/`))) continue;
    const value = packageDir(shorten(path, cwd));
    if (!found.some((e) => e.value === value)) {
      found.push({ permission: "read", value });
    }
  }
  return found;
}
