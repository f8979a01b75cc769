/**
 * Learn mode, a development aid, in three steps: (1) on Deno, one run with
 * everything granted under Deno's permission audit
 * (`DENO_AUDIT_PERMISSIONS`, written to the worker's stderr, so the parent
 * needs no write access) gives a first suggestion; (2) runs under the OS
 * sandbox add each grant a refusal's hint names (native code's accesses
 * too, which the audit cannot see), after the reads Deno refused that a
 * library fell back to, until the calls pass; (3) each entry is removed in
 * turn, the widest first, and kept only if the calls then fail. Never for
 * production: the audit run is unconfined.
 *
 * @module
 */

import { WorkerStartError } from "../errors.ts";
import {
  dirname,
  existsSync,
  isAbsolute,
  isDeepStrictEqual,
  join,
  mkdtempSync,
  readFileSync,
  relative,
  rmSync,
  statSync,
  tmpdir,
} from "../runtime/node_builtins.ts";
import { detect } from "../runtime/detect.ts";
import type { Permissions } from "../runtime/permissions.ts";
import { grantInHint } from "./_hints.ts";
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
  /**
   * The runtime of the worker. Only Deno has the audit (step 1); on Bun the
   * suggestion is built from the sandbox's refusals alone.
   *
   * @default {"deno"}
   */
  runtime?: "deno" | "bun";
  /**
   * Most sandboxed runs (steps 2 and 3 together), each a worker start that
   * makes every call once more: the calls must give the same result when
   * repeated (open, read, write the same key).
   *
   * @default {60}
   */
  maxRuns?: number;
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
  /**
   * Grants the sandbox's refusals added to the audit's (step 2): those the
   * hints named, the reads Deno refused that a library fell back to, and
   * the data directories of a failure that named nothing.
   */
  refused: readonly LearnedAccess[];
  /**
   * Entries the calls passed without (step 3); `value: "true"` for a kind
   * a refusal had granted wholesale.
   */
  removed: readonly LearnedAccess[];
  /** How many sandboxed runs it took. */
  runs: number;
  /** What the audit cannot see, to check by hand. */
  unseen: readonly string[];
}

/** What the mode cannot see, said with every result. */
const UNSEEN: readonly string[] = [
  "accesses on code paths the calls did not take",
  "a refusal that says nothing of what was refused (a bare EPERM from a system call, a library that swallows the error): the learning stops there and names the failing call",
  "siblings a library creates later (SQLite's -wal, -shm and -journal files): grant the directory where one appears",
  "a write that fails without an error (hnswlib-node's writeIndex) while a file an earlier run left answers the read back: give each run's files new names",
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
): Pick<LearnedPermissions, "permissions" | "accesses"> {
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
 * import { packageDir } from "./learn.ts";
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

function shorten(path: string, cwd: string): string {
  const inside = relative(cwd, path);
  return inside !== "" && !inside.startsWith("..") && !isAbsolute(inside)
    ? `./${inside}`
    : path;
}

/** One entry of a suggestion: a kind and one scope of it. */
type Entry = { permission: string; value: string };

const PATH_KINDS = new Set(["read", "write", "run", "ffi"]);

/** Kinds step 3 tries to remove first: each reaches beyond one file. */
const WIDE_KINDS = new Set(["sys", "net", "run"]);

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

function entriesOf(permissions: Permissions, cwd: string): Entry[] {
  const entries: Entry[] = [];
  for (const kind of KINDS) {
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

function permissionsOf(
  entries: readonly Entry[],
  all: Set<string>,
): Permissions {
  const permissions: Permissions = {};
  for (const kind of KINDS) {
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
function dataGrants(
  calls: LearnOptions["calls"],
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
function missing(path: string): boolean {
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

function entryKey(entry: Entry): string {
  return `${entry.permission}\0${entry.value}`;
}

/** A path the audit recorded, absolute (relative ones are the worker's). */
function resolveIn(value: string, cwd: string): string {
  return isAbsolute(value) ? value : join(cwd, value);
}

/**
 * The reads a sandboxed run's audit recorded that no entry grants (Deno
 * refused them) and that were not tried before (`tried`, the unconfined
 * run's accesses among them): a library's fallback after a refusal it
 * swallowed. Marks them tried.
 */
function fallbackReads(
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

/** Whether two failures are one: the same grant named, or the same text. */
function sameFailure(a: unknown, b: unknown): boolean {
  const [ga, gb] = [hintedGrant(a), hintedGrant(b)];
  if (ga !== undefined || gb !== undefined) {
    return ga?.kind === gb?.kind && ga?.value === gb?.value;
  }
  return String((a as { message?: unknown })?.message) ===
    String((b as { message?: unknown })?.message);
}

/** The first grant a failure's hints name, in it or its causes. */
function hintedGrant(error: unknown): ReturnType<typeof grantInHint> {
  let current: unknown = error;
  for (let depth = 0; depth < 8; depth++) {
    if (typeof current !== "object" || current === null) return undefined;
    const { hint, message } = current as { hint?: unknown; message?: unknown };
    for (const text of [hint, message]) {
      if (typeof text !== "string") continue;
      const grant = grantInHint(text);
      if (grant) return grant;
    }
    current = (current as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * Learns the permissions a worker needs, in one call: an audit run (Deno),
 * then sandboxed runs that add what the OS sandbox refused (native code
 * included) until the calls pass, then one run without each entry, which
 * is kept only if the calls then fail. The result works pasted in as it is
 * and holds nothing the calls did not need: paths inside `node_modules`
 * collapsed to their package's directory, no write the calls made without.
 * Works from a parent with the README's minimum flags (`--allow-run
 * --allow-read --allow-env` on Deno). A development aid: the audit run is
 * unconfined, so never run it on code or data you do not trust.
 *
 * @param module The worker module.
 * @param options The calls to make and the worker's env and cwd.
 * @returns The suggestion, the audit's accesses, what the sandbox added and
 *   what was removed, and what the mode cannot see.
 * @throws {WorkerStartError} when the worker cannot start, or Deno wrote no
 * audit (a Deno older than 2.7).
 * @throws {RemoteError} when a call fails for a reason no hint names (the
 * message of the error says which grants were learned until then).
 *
 * @example
 * ```ts ignore
 * import { learnPermissions } from "@airlock/airlock/unstable-learn";
 *
 * const learned = await learnPermissions(new URL("./workers/db.ts", import.meta.url), {
 *   calls: [["open", "./data"], ["put", "k", "v"]],
 * });
 * console.log(learned.permissions); // { read: ["./data"], write: ["./data"], sys: ["uid"] }
 * ```
 */
export async function learnPermissions(
  module: string | URL,
  options: LearnOptions,
): Promise<LearnedPermissions> {
  const cwd = options.cwd ?? detect().cwd();
  const runtime = options.runtime ?? "deno";
  const maxRuns = options.maxRuns ?? 60;
  const timeouts = options.callTimeoutMs === undefined
    ? {}
    : { callTimeoutMs: options.callTimeoutMs };
  const common = {
    runtime,
    env: { ...options.env },
    cwd,
    maxRetries: 0,
    ...timeouts,
  } as const;
  const callAll = async (
    worker: { call(op: string, args: unknown[]): Promise<unknown> },
  ): Promise<unknown[]> => {
    const results: unknown[] = [];
    for (const [op, ...args] of options.calls) {
      results.push(await worker.call(op, args));
    }
    return results;
  };
  // What the calls answer with what they need: a run whose answers differ
  // lacked something, even if nothing threw (Deno's --ignore-env reads a
  // variable not granted as unset).
  let reference: unknown[] | undefined;

  // Step 1: Deno's audit, on the worker's stderr (no file to write).
  let accesses: readonly LearnedAccess[] = [];
  let entries: Entry[] = [];
  // Entries every access of which was to a path that does not exist.
  const missingOnly = new Set<string>();
  if (runtime === "deno") {
    // A Deno parent gives the worker's stderr a pipe, which Deno can open
    // by name: no file, so the parent needs no write access. A Bun
    // parent's is a socket (ENXIO), but Bun has no permissions to need.
    const file = detect().name === "deno"
      ? undefined
      : join(mkdtempSync(join(tmpdir(), "airlock-learn-")), "audit.jsonl");
    const lines: string[] = [];
    try {
      {
        await using worker = await session(module, {
          ...common,
          permissions: "all",
          sandbox: "none",
          env: {
            ...options.env,
            DENO_AUDIT_PERMISSIONS: file ?? "/dev/stderr",
          },
          onStderr: (line) => void lines.push(line),
        });
        reference = await callAll(worker);
      }
      if (file !== undefined) {
        try {
          lines.push(...readFileSync(file, "utf8").split("\n"));
        } catch {
          // No audit written: reported below.
        }
      }
    } finally {
      if (file !== undefined) {
        rmSync(join(file, ".."), { recursive: true, force: true });
      }
    }
    const audit = lines.filter((line) => line.startsWith('{"v":'));
    if (audit.length === 0) {
      throw new WorkerStartError({
        module: String(module),
        failure: "spawn",
        detail:
          "Deno wrote no permission audit (DENO_AUDIT_PERMISSIONS needs Deno 2.7 or later)",
      });
    }
    const found = permissionsFromAudit(audit.join("\n"), cwd, []);
    accesses = found.accesses;
    entries = entriesOf(found.permissions, cwd);
    const present = new Set<string>();
    for (const { permission, value } of accesses) {
      if (!PATH_KINDS.has(permission)) continue;
      const key = entryKey({
        permission,
        value: packageDir(isAbsolute(value) ? shorten(value, cwd) : value),
      });
      if (missing(resolveIn(value, cwd))) missingOnly.add(key);
      else present.add(key);
    }
    for (const key of present) missingOnly.delete(key);
  }

  let runs = 0;
  const all = new Set<string>();
  // The sandboxed runs of a Deno worker keep the audit on (on the worker's
  // stderr pipe under a Deno parent, as in step 1): it records the checks
  // Deno refused too, the ones a library swallows and falls back from
  // (detect-libc reads /usr/bin/ldd when /proc/self/exe is refused, then
  // lists the interfaces). A Bun parent's worker stderr is a socket: there
  // the audit goes to a file in a directory of the run's own, granted for
  // writing to that run only (never to the suggestion).
  const auditToFile = detect().name !== "deno";
  let lastAudit: string[] = [];
  const attempt = async (candidate: readonly Entry[]): Promise<unknown> => {
    runs++;
    const lines: string[] = [];
    lastAudit = lines;
    const permissions = permissionsOf(candidate, all);
    const auditDir = runtime === "deno" && auditToFile
      ? mkdtempSync(join(tmpdir(), "airlock-learn-"))
      : undefined;
    try {
      await using worker = await session(module, {
        ...common,
        permissions: auditDir === undefined || permissions.write === true
          ? permissions
          : {
            ...permissions,
            write: [
              ...(Array.isArray(permissions.write) ? permissions.write : []),
              auditDir,
            ],
          },
        ...(runtime === "deno"
          ? {
            env: {
              ...options.env,
              DENO_AUDIT_PERMISSIONS: auditDir === undefined
                ? "/dev/stderr"
                : join(auditDir, "audit.jsonl"),
            },
            onStderr: (line: string) => {
              if (line.startsWith('{"v":')) lines.push(line);
            },
          }
          : { onStderr: () => {} }),
      });
      const results = await callAll(worker);
      if (reference === undefined) reference = results;
      else if (!isDeepStrictEqual(results, reference)) {
        return new Error(
          `the calls answered otherwise than with everything granted: ${
            JSON.stringify(results).slice(0, 200)
          }`,
        );
      }
      return undefined;
    } catch (error: unknown) {
      return error ?? new Error("the calls failed");
    } finally {
      if (auditDir !== undefined) {
        try {
          lines.push(
            ...readFileSync(join(auditDir, "audit.jsonl"), "utf8").split("\n")
              .filter((line) => line.startsWith('{"v":')),
          );
        } catch {
          // No audit written (the worker did not start).
        }
        rmSync(auditDir, { recursive: true, force: true });
      }
    }
  };
  const outOfRuns = (why: unknown) =>
    new WorkerStartError({
      module: String(module),
      failure: "spawn",
      detail:
        `learnPermissions used its ${maxRuns} runs (maxRuns) before the calls passed under the sandbox; learned so far: ${
          JSON.stringify(permissionsOf(entries, all))
        }`,
      cause: why,
    });

  // Step 2: what the sandbox refuses, until the calls pass. Before the
  // grant a refusal names, the reads Deno refused in that run that the
  // unconfined run never made are tried, once: a library's fallback (the
  // narrower grant, a file) came before the refusal (the wider one, `sys`
  // or `net`). They are taken back if the same refusal comes again.
  const refused: Entry[] = [];
  const tried = new Set<string>(
    accesses.map((a) => `${a.permission}\0${resolveIn(a.value, cwd)}`),
  );
  let guessed = false;
  let failure = await attempt(entries);
  while (failure !== undefined) {
    const fallbacks = fallbackReads(lastAudit, entries, tried, cwd);
    if (fallbacks.length > 0) {
      entries.push(...fallbacks);
      if (runs >= maxRuns) throw outOfRuns(failure);
      const next = await attempt(entries);
      if (next !== undefined && sameFailure(next, failure)) {
        entries = entries.filter((e) => !fallbacks.includes(e));
      } else {
        refused.push(...fallbacks);
        failure = next;
        continue;
      }
    }
    const grant = hintedGrant(failure);
    const entry = grant &&
      (grant.value === true
        ? undefined
        : { permission: grant.kind, value: grant.value });
    const known = entry !== undefined &&
      entries.some((e) =>
        e.permission === entry.permission && e.value === entry.value
      );
    if (
      grant === undefined || known ||
      (grant.value === true && all.has(grant.kind))
    ) {
      // Native code that names nothing ("unable to open database: 14",
      // "Cannot open file …: Permission denied"): the data the calls name
      // (their string arguments that are paths here), once; step 3 keeps
      // only what is needed.
      const guesses = guessed ? [] : dataGrants(options.calls, cwd).filter(
        (g) =>
          !entries.some((e) =>
            e.permission === g.permission && e.value === g.value
          ),
      );
      guessed = true;
      if (guesses.length > 0) {
        entries.push(...guesses);
        refused.push(...guesses);
        if (runs >= maxRuns) throw outOfRuns(failure);
        failure = await attempt(entries);
        continue;
      }
      if (failure instanceof Error) {
        failure.message +=
          ` (learnPermissions: no grant names this failure; learned so far: ${
            JSON.stringify(permissionsOf(entries, all))
          })`;
      }
      throw failure;
    }
    if (entry === undefined) all.add(grant.kind);
    else {
      entries.push(entry);
      refused.push(entry);
    }
    if (runs >= maxRuns) throw outOfRuns(failure);
    failure = await attempt(entries);
  }

  // Step 3: each entry needed, or removed. The entries of only missing
  // paths (a loader's probes for a build that is not there: lmdb's
  // prebuilds/, build/Release/) go first, together, in one run; one at a
  // time only if the calls need one of them.
  const removed: Entry[] = [];
  const probes = entries.filter((e) => missingOnly.has(entryKey(e)));
  if (probes.length > 1) {
    if (runs >= maxRuns) throw outOfRuns(undefined);
    const without = entries.filter((e) => !probes.includes(e));
    if (await attempt(without) === undefined) {
      entries = without;
      removed.push(...probes);
    }
  }
  // The widest first: a kind granted wholesale, then `sys`, `net` and `run`
  // scopes, so that where a narrower entry does as well (a file a library
  // reads instead of asking the system) the narrower one is what stays.
  for (const kind of KINDS.filter((k) => all.has(k))) {
    if (runs >= maxRuns) throw outOfRuns(undefined);
    all.delete(kind);
    if (await attempt(entries) === undefined) {
      removed.push({ permission: kind, value: "true" });
    } else all.add(kind);
  }
  const wide = (e: Entry) => WIDE_KINDS.has(e.permission) ? 0 : 1;
  const rest = entries.filter((e) => !removed.includes(e)).sort((a, b) =>
    wide(a) - wide(b)
  );
  for (const entry of rest) {
    if (runs >= maxRuns) throw outOfRuns(undefined);
    const without = entries.filter((e) => e !== entry);
    if (await attempt(without) === undefined) {
      entries = without;
      removed.push(entry);
    }
  }
  return {
    permissions: permissionsOf(entries, all),
    accesses,
    refused,
    removed,
    runs,
    unseen: UNSEEN,
  };
}
