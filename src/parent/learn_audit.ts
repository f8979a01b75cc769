/**
 * Deno's permission audit (`DENO_AUDIT_PERMISSIONS`, one JSON object a
 * line) read as the accesses a worker made and a first suggestion, for
 * learn mode (`learn.ts`).
 *
 * @module
 */

import { isAbsolute, relative } from "../runtime/node_builtins.ts";
import { PERMISSION_KINDS, type Permissions } from "../runtime/permissions.ts";

/** One permission check Deno recorded. */
export interface LearnedAccess {
  /** The kind: `"read"`, `"write"`, `"net"`, `"env"`, `"run"`, `"ffi"` or `"sys"`. */
  permission: string;
  /** What was checked: a path, `host:port`, a variable name… */
  value: string;
}

/** Variables airlock gives a Deno worker itself, never to suggest. */
const OWN_ENV = new Set([
  "DENO_AUDIT_PERMISSIONS",
  "DENO_DIR",
  "DENO_NO_UPDATE_CHECK",
  "DENO_DISABLE_NODE_SHIM",
  "NO_COLOR",
]);

/**
 * Turns Deno's audit log (one JSON object a line: `{ permission, value }`)
 * into the accesses and a suggested `permissions` object. Paths inside
 * `cwd` become relative (`./data/app.db`); lines that are not audit
 * entries are skipped.
 *
 * @param log The audit file's text.
 * @param cwd The worker's working directory.
 * @param ignore Paths whose accesses are airlock's own (the audit file).
 * @returns The accesses and the suggestion (without `unseen`).
 *
 * @example
 * ```ts
 * import { permissionsFromAudit } from "./learn_audit.ts";
 * import assert from "node:assert/strict";
 *
 * const log = [
 *   '{"v":1,"permission":"read","value":"/app/data/app.db"}',
 *   '{"v":1,"permission":"env","value":"DB_URL"}',
 *   '{"v":1,"permission":"net","value":"db.internal:5432"}',
 * ].join("\n");
 * const learned = permissionsFromAudit(log, "/app", []);
 * assert.deepEqual(learned.permissions, {
 *   read: ["./data/app.db"],
 *   env: ["DB_URL"],
 *   net: ["db.internal:5432"],
 * });
 * ```
 */
export function permissionsFromAudit(
  log: string,
  cwd: string,
  ignore: readonly string[],
): { permissions: Permissions; accesses: LearnedAccess[] } {
  const seen = new Set<string>();
  const accesses: LearnedAccess[] = [];
  for (const line of log.split("\n")) {
    if (line.trim() === "") continue;
    let entry: unknown;
    try {
      entry = JSON.parse(line);
    } catch {
      continue;
    }
    const { permission, value } = (entry ?? {}) as Record<string, unknown>;
    if (typeof permission !== "string" || typeof value !== "string") continue;
    if (permission === "env" && OWN_ENV.has(value)) continue;
    if (ignore.some((path) => value === path || value.startsWith(`${path}/`))) {
      continue;
    }
    const key = `${permission}\0${value}`;
    if (seen.has(key)) continue;
    seen.add(key);
    accesses.push({ permission, value });
  }
  const permissions: Permissions = {};
  for (const kind of PERMISSION_KINDS) {
    const values = accesses.filter((access) => access.permission === kind)
      .map((access) =>
        (kind === "read" || kind === "write" || kind === "ffi") &&
          isAbsolute(access.value)
          ? shorten(access.value, cwd)
          : access.value
      );
    if (values.length > 0) permissions[kind] = [...new Set(values)];
  }
  return { permissions, accesses };
}

/**
 * A path inside `node_modules` as its package's directory
 * (`…/node_modules/@scope/name` or `…/node_modules/name`): a package reads
 * its own files, and one grant for them is what a user keeps.
 *
 * @param path A path.
 * @returns The package directory, or the path.
 *
 * @example
 * ```ts
 * import { packageDir } from "./learn_audit.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(
 *   packageDir("./node_modules/hnswlib-node/build/Release/addon.node"),
 *   "./node_modules/hnswlib-node",
 * );
 * assert.equal(packageDir("/app/node_modules/@libsql/linux-x64-gnu/index.node"), "/app/node_modules/@libsql/linux-x64-gnu");
 * assert.equal(packageDir("./data/app.db"), "./data/app.db");
 * ```
 */
export function packageDir(path: string): string {
  const marker = "/node_modules/";
  const at = path.lastIndexOf(marker);
  if (at === -1) return path;
  const rest = path.slice(at + marker.length).split("/");
  const name = rest[0]?.startsWith("@") ? rest.slice(0, 2) : rest.slice(0, 1);
  if (name.length === 0 || name.some((part) => part === "")) return path;
  return `${path.slice(0, at + marker.length)}${name.join("/")}`;
}

/** `path` relative to `cwd` (`./data`) when inside it. */
export function shorten(path: string, cwd: string): string {
  const inside = relative(cwd, path);
  return inside !== "" && !inside.startsWith("..") && !isAbsolute(inside)
    ? `./${inside}`
    : path;
}
