/**
 * Learn mode, a development aid: runs a Deno worker with everything granted
 * under Deno's permission audit (`DENO_AUDIT_PERMISSIONS`, Deno 2.7 and
 * later), makes the calls given, and turns every permission check Deno
 * recorded into a suggested `permissions` object. Never for production: the
 * worker runs unconfined while it learns.
 *
 * @module
 */

import { WorkerStartError } from "../errors.ts";
import {
  isAbsolute,
  join,
  mkdtempSync,
  readFileSync,
  relative,
  rmSync,
  tmpdir,
} from "../runtime/node_builtins.ts";
import { detect } from "../runtime/detect.ts";
import type { Permissions } from "../runtime/permissions.ts";
import { session } from "./session.ts";

/** Options of {@linkcode learnPermissions}. */
export interface LearnOptions {
  /**
   * The calls to make, each `[op, ...args]`, in order: the worker's
   * accesses during them (and during its start) are what is learned.
   */
  calls: readonly (readonly [op: string, ...args: unknown[]])[];
  /**
   * The worker's environment, as the `env` option.
   *
   * @default {{}}
   */
  env?: Readonly<Record<string, string>>;
  /**
   * The worker's working directory; suggested paths inside it are relative.
   *
   * @default {the parent's working directory}
   */
  cwd?: string;
  /**
   * Deadline of each call, in milliseconds (`0`: none).
   *
   * @default {300000}
   */
  callTimeoutMs?: number;
}

/** One permission check Deno recorded. */
export interface LearnedAccess {
  /** The kind: `"read"`, `"write"`, `"net"`, `"env"`, `"run"`, `"ffi"` or `"sys"`. */
  permission: string;
  /** What was checked: a path, `host:port`, a variable name… */
  value: string;
}

/** What {@linkcode learnPermissions} found. */
export interface LearnedPermissions {
  /** A suggested `permissions` object: every access seen, nothing more. */
  permissions: Permissions;
  /** The accesses as Deno recorded them, deduplicated, in order. */
  accesses: readonly LearnedAccess[];
  /** What the audit cannot see, to check by hand. */
  unseen: readonly string[];
}

/** What the mode cannot see, said with every result. */
const UNSEEN: readonly string[] = [
  "files, sockets and processes opened by native code (ffi, Node-API add-ons): Deno records the library it loads, not what the library does",
  "what a started program does (run)",
  "accesses on code paths the calls did not take",
  "siblings a library creates later (SQLite's -wal, -shm and -journal files): grant the directory where one appears",
];

/** Variables airlock gives a Deno worker itself, never to suggest. */
const OWN_ENV = new Set([
  "DENO_AUDIT_PERMISSIONS",
  "DENO_DIR",
  "DENO_NO_UPDATE_CHECK",
  "DENO_DISABLE_NODE_SHIM",
  "NO_COLOR",
]);

const KINDS = ["read", "write", "net", "env", "run", "ffi", "sys"] as const;

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
 * import { permissionsFromAudit } from "./learn.ts";
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
): Omit<LearnedPermissions, "unseen"> {
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
  for (const kind of KINDS) {
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

function shorten(path: string, cwd: string): string {
  const inside = relative(cwd, path);
  return inside !== "" && !inside.startsWith("..") && !isAbsolute(inside)
    ? `./${inside}`
    : path;
}

/**
 * Learns the permissions a Deno worker needs: starts it with everything
 * granted (`permissions: "all"`, no sandbox) and Deno's permission audit
 * on, makes `calls`, and suggests a `permissions` object holding every
 * access Deno checked, nothing more. A development aid for finding what a
 * native package needs in one run instead of one failing run per
 * permission; review the suggestion, and never run a worker this way in
 * production.
 *
 * @param module The worker module.
 * @param options The calls to make and the worker's env and cwd.
 * @returns The suggestion, the raw accesses, and what the mode cannot see.
 * @throws {WorkerStartError} when the worker cannot start, or Deno wrote no
 * audit (a Deno older than 2.7).
 * @throws {RemoteError} when a call fails (the accesses until then are lost:
 * fix the call first).
 *
 * @example
 * ```ts ignore
 * import { learnPermissions } from "@airlock/airlock/unstable-learn";
 *
 * const learned = await learnPermissions(new URL("./workers/db.ts", import.meta.url), {
 *   calls: [["open", "./data/app.db"], ["query", "select 1"]],
 * });
 * console.log(learned.permissions); // { read: ["./data/app.db"], write: [...], ffi: [...] }
 * ```
 */
export async function learnPermissions(
  module: string | URL,
  options: LearnOptions,
): Promise<LearnedPermissions> {
  const dir = mkdtempSync(join(tmpdir(), "airlock-learn-"));
  const audit = join(dir, "audit.jsonl");
  const cwd = options.cwd ?? detect().cwd();
  try {
    {
      await using worker = await session(module, {
        runtime: "deno",
        permissions: "all",
        sandbox: "none",
        env: { ...options.env, DENO_AUDIT_PERMISSIONS: audit },
        cwd,
        ...(options.callTimeoutMs === undefined
          ? {}
          : { callTimeoutMs: options.callTimeoutMs }),
      });
      for (const [op, ...args] of options.calls) await worker.call(op, args);
    }
    let log: string;
    try {
      log = readFileSync(audit, "utf8");
    } catch (error: unknown) {
      throw new WorkerStartError({
        module: String(module),
        failure: "spawn",
        detail:
          `Deno wrote no permission audit (DENO_AUDIT_PERMISSIONS needs Deno 2.7 or later)`,
        cause: error,
      });
    }
    return { ...permissionsFromAudit(log, cwd, [dir]), unseen: UNSEEN };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
