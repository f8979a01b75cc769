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
  isAbsolute,
  isDeepStrictEqual,
  join,
  mkdtempSync,
  readFileSync,
  rmSync,
  tmpdir,
} from "../runtime/node_builtins.ts";
import { detect } from "../runtime/detect.ts";
import { PERMISSION_KINDS, type Permissions } from "../runtime/permissions.ts";
import { grantInHint } from "./_hints.ts";
import {
  dataGrants,
  entriesOf,
  type Entry,
  entryKey,
  fallbackReads,
  missing,
  PATH_KINDS,
  permissionsOf,
  resolveIn,
  WIDE_KINDS,
} from "./_learn_entries.ts";
import {
  type LearnedAccess,
  packageDir,
  permissionsFromAudit,
  shorten,
} from "./learn_audit.ts";
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
  const learning: Learning = {
    module,
    calls: options.calls,
    env: options.env ?? {},
    cwd,
    runtime,
    maxRuns: options.maxRuns ?? 60,
    common: {
      runtime,
      env: { ...options.env },
      cwd,
      maxRetries: 0,
      ...(options.callTimeoutMs === undefined
        ? {}
        : { callTimeoutMs: options.callTimeoutMs }),
    },
    reference: undefined,
    entries: [],
    all: new Set(),
    runs: 0,
    lastAudit: [],
  };
  const { accesses, missingOnly } = runtime === "deno"
    ? await auditRun(learning)
    : { accesses: [], missingOnly: new Set<string>() };
  const refused = await addRefused(learning, accesses);
  const removed = await removeUnneeded(learning, missingOnly);
  return {
    permissions: permissionsOf(learning.entries, learning.all),
    accesses,
    refused,
    removed,
    runs: learning.runs,
    unseen: UNSEEN,
  };
}

/** One learning: what it runs, and what it has found so far. */
interface Learning {
  readonly module: string | URL;
  readonly calls: LearnOptions["calls"];
  readonly env: Readonly<Record<string, string>>;
  readonly cwd: string;
  readonly runtime: "deno" | "bun";
  readonly maxRuns: number;
  /** The session options of every run. */
  readonly common: {
    readonly runtime: "deno" | "bun";
    readonly env: Record<string, string>;
    readonly cwd: string;
    readonly maxRetries: 0;
    readonly callTimeoutMs?: number;
  };
  /**
   * What the calls answer with what they need: a run whose answers differ
   * lacked something, even if nothing threw (Deno's --ignore-env reads a
   * variable not granted as unset).
   */
  reference: unknown[] | undefined;
  /** The suggestion so far. */
  entries: Entry[];
  /** Kinds granted wholesale. */
  readonly all: Set<string>;
  /** Sandboxed runs so far. */
  runs: number;
  /** The audit lines of the last sandboxed run. */
  lastAudit: string[];
}

async function callAll(
  learning: Learning,
  worker: { call(op: string, args: unknown[]): Promise<unknown> },
): Promise<unknown[]> {
  const results: unknown[] = [];
  for (const [op, ...args] of learning.calls) {
    results.push(await worker.call(op, args));
  }
  return results;
}

/**
 * Step 1: one run with everything granted under Deno's audit, on the
 * worker's stderr (no file to write). Sets the suggestion's first entries
 * and the reference answers.
 *
 * @returns The audit's accesses, and the keys of the entries every access
 *   of which was to a path that does not exist.
 */
async function auditRun(
  learning: Learning,
): Promise<{ accesses: readonly LearnedAccess[]; missingOnly: Set<string> }> {
  const { cwd } = learning;
  // A Deno parent gives the worker's stderr a pipe, which Deno can open
  // by name: no file, so the parent needs no write access. A Bun
  // parent's is a socket (ENXIO), but Bun has no permissions to need.
  const file = detect().name === "deno"
    ? undefined
    : join(mkdtempSync(join(tmpdir(), "airlock-learn-")), "audit.jsonl");
  const lines: string[] = [];
  try {
    {
      await using worker = await session(learning.module, {
        ...learning.common,
        permissions: "all",
        sandbox: "none",
        env: {
          ...learning.env,
          DENO_AUDIT_PERMISSIONS: file ?? "/dev/stderr",
        },
        onStderr: (line) => void lines.push(line),
      });
      learning.reference = await callAll(learning, worker);
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
      module: String(learning.module),
      failure: "spawn",
      detail:
        "Deno wrote no permission audit (DENO_AUDIT_PERMISSIONS needs Deno 2.7 or later)",
    });
  }
  const found = permissionsFromAudit(audit.join("\n"), cwd, []);
  learning.entries = entriesOf(found.permissions, cwd);
  const missingOnly = new Set<string>();
  const present = new Set<string>();
  for (const { permission, value } of found.accesses) {
    if (!PATH_KINDS.has(permission)) continue;
    const key = entryKey({
      permission,
      value: packageDir(isAbsolute(value) ? shorten(value, cwd) : value),
    });
    if (missing(resolveIn(value, cwd))) missingOnly.add(key);
    else present.add(key);
  }
  for (const key of present) missingOnly.delete(key);
  return { accesses: found.accesses, missingOnly };
}

/**
 * One sandboxed run with `candidate` (and the kinds granted wholesale).
 * A Deno worker keeps the audit on (on the worker's stderr pipe under a
 * Deno parent, as in step 1): it records the checks Deno refused too, the
 * ones a library swallows and falls back from (detect-libc reads
 * /usr/bin/ldd when /proc/self/exe is refused, then lists the interfaces).
 * A Bun parent's worker stderr is a socket: there the audit goes to a file
 * in a directory of the run's own, granted for writing to that run only
 * (never to the suggestion).
 *
 * @returns `undefined` when the calls passed with the reference answers,
 *   else the failure.
 */
async function attempt(
  learning: Learning,
  candidate: readonly Entry[],
): Promise<unknown> {
  learning.runs++;
  const lines: string[] = [];
  learning.lastAudit = lines;
  const permissions = permissionsOf(candidate, learning.all);
  const deno = learning.runtime === "deno";
  const auditDir = deno && detect().name !== "deno"
    ? mkdtempSync(join(tmpdir(), "airlock-learn-"))
    : undefined;
  try {
    await using worker = await session(learning.module, {
      ...learning.common,
      permissions: auditDir === undefined || permissions.write === true
        ? permissions
        : {
          ...permissions,
          write: [
            ...(Array.isArray(permissions.write) ? permissions.write : []),
            auditDir,
          ],
        },
      ...(deno
        ? {
          env: {
            ...learning.env,
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
    const results = await callAll(learning, worker);
    if (learning.reference === undefined) learning.reference = results;
    else if (!isDeepStrictEqual(results, learning.reference)) {
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
}

/** @throws {WorkerStartError} when the learning has used its `maxRuns`. */
function checkRunsLeft(learning: Learning, why: unknown): void {
  if (learning.runs < learning.maxRuns) return;
  throw new WorkerStartError({
    module: String(learning.module),
    failure: "spawn",
    detail:
      `learnPermissions used its ${learning.maxRuns} runs (maxRuns) before the calls passed under the sandbox; learned so far: ${
        JSON.stringify(permissionsOf(learning.entries, learning.all))
      }`,
    cause: why,
  });
}

/**
 * Step 2: what the sandbox refuses, until the calls pass. Before the
 * grant a refusal names, the reads Deno refused in that run that the
 * unconfined run never made are tried, once: a library's fallback (the
 * narrower grant, a file) came before the refusal (the wider one, `sys`
 * or `net`). They are taken back if the same refusal comes again.
 *
 * @returns The entries it added.
 * @throws {unknown} the failure no grant names, once the calls' data was
 *   tried.
 */
async function addRefused(
  learning: Learning,
  accesses: readonly LearnedAccess[],
): Promise<Entry[]> {
  const { cwd, all } = learning;
  const refused: Entry[] = [];
  const tried = new Set<string>(
    accesses.map((a) => `${a.permission}\0${resolveIn(a.value, cwd)}`),
  );
  let guessed = false;
  let failure = await attempt(learning, learning.entries);
  while (failure !== undefined) {
    const fallbacks = fallbackReads(
      learning.lastAudit,
      learning.entries,
      tried,
      cwd,
    );
    if (fallbacks.length > 0) {
      learning.entries.push(...fallbacks);
      checkRunsLeft(learning, failure);
      const next = await attempt(learning, learning.entries);
      if (next !== undefined && sameFailure(next, failure)) {
        learning.entries = learning.entries.filter((e) =>
          !fallbacks.includes(e)
        );
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
      learning.entries.some((e) =>
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
      const guesses = guessed ? [] : dataGrants(learning.calls, cwd).filter(
        (g) =>
          !learning.entries.some((e) =>
            e.permission === g.permission && e.value === g.value
          ),
      );
      guessed = true;
      if (guesses.length === 0) throw unnamed(learning, failure);
      learning.entries.push(...guesses);
      refused.push(...guesses);
    } else if (entry === undefined) all.add(grant.kind);
    else {
      learning.entries.push(entry);
      refused.push(entry);
    }
    checkRunsLeft(learning, failure);
    failure = await attempt(learning, learning.entries);
  }
  return refused;
}

/** A failure no grant names, saying what was learned until then. */
function unnamed(learning: Learning, failure: unknown): unknown {
  if (failure instanceof Error) {
    failure.message +=
      ` (learnPermissions: no grant names this failure; learned so far: ${
        JSON.stringify(permissionsOf(learning.entries, learning.all))
      })`;
  }
  return failure;
}

/**
 * Step 3: each entry needed, or removed. The entries of only missing
 * paths (a loader's probes for a build that is not there: lmdb's
 * prebuilds/, build/Release/) go first, together, in one run; one at a
 * time only if the calls need one of them. Then the widest first: a kind
 * granted wholesale, then `sys`, `net` and `run` scopes, so that where a
 * narrower entry does as well (a file a library reads instead of asking
 * the system) the narrower one is what stays.
 *
 * @returns The entries removed.
 */
async function removeUnneeded(
  learning: Learning,
  missingOnly: ReadonlySet<string>,
): Promise<Entry[]> {
  const { all } = learning;
  const removed: Entry[] = [];
  const probes = learning.entries.filter((e) => missingOnly.has(entryKey(e)));
  if (probes.length > 1) {
    checkRunsLeft(learning, undefined);
    const without = learning.entries.filter((e) => !probes.includes(e));
    if (await attempt(learning, without) === undefined) {
      learning.entries = without;
      removed.push(...probes);
    }
  }
  for (const kind of PERMISSION_KINDS.filter((k) => all.has(k))) {
    checkRunsLeft(learning, undefined);
    all.delete(kind);
    if (await attempt(learning, learning.entries) === undefined) {
      removed.push({ permission: kind, value: "true" });
    } else all.add(kind);
  }
  const wide = (e: Entry) => WIDE_KINDS.has(e.permission) ? 0 : 1;
  const rest = learning.entries.filter((e) => !removed.includes(e));
  rest.sort((a, b) => wide(a) - wide(b));
  for (const entry of rest) {
    checkRunsLeft(learning, undefined);
    const without = learning.entries.filter((e) => e !== entry);
    if (await attempt(learning, without) === undefined) {
      learning.entries = without;
      removed.push(entry);
    }
  }
  return removed;
}
