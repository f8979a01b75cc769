/**
 * Self-exec: workers of a program compiled into one executable
 * (`bun build --compile`, `deno compile`). Such a program has no runtime
 * binary and no airlock source files on disk to start `workers/entry.ts`
 * with, so the executable starts itself again with an environment marker
 * naming the worker module. `mod.ts`, which the program imports before its
 * own main code runs, sees the marker, serves that module, and never lets the
 * program's main code run (a top-level `await` that does not settle until
 * the worker process exits).
 *
 * - Parent side: {@linkcode selfExecCommand} builds the command (the
 *   executable itself, or `deno run <entry>` / `bun <entry>` when forced with
 *   `AIRLOCK_SELF_EXEC=1`), the marker, and the OS sandbox around it; a depth
 *   guard refuses to start when the process is itself a self-exec child that
 *   did not enter worker mode, which would otherwise start itself in a loop.
 * - Worker side: {@linkcode selfExecWorker} reads and clears the marker.
 *
 * See docs/operations.md, "Single compiled binaries".
 *
 * @module
 */

import { basename, dirname } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { PermissionError, WorkerStartError } from "../errors.ts";
import { detectRuntime } from "./detect.ts";
import {
  denoPermissionFlags,
  type ResolvedPermissions,
} from "./permissions.ts";
import {
  denoCacheMounts,
  locateBwrap,
  sandboxDecision,
  sandboxedArgv,
  workerMounts,
} from "./sandbox.ts";
import type { RuntimeAdapter, RuntimeName } from "./types.ts";

/** The marker: set in a self-exec worker's environment to the URL of the module it serves. */
export const WORKER_MODULE_ENV = "AIRLOCK_WORKER_MODULE";
/** How many levels of self-exec a worker is below the first program (1 for its child). */
export const WORKER_DEPTH_ENV = "AIRLOCK_WORKER_DEPTH";
/**
 * Set to `1` in a program's environment to use self-exec although it is not
 * compiled: the program's entry is run again with `deno run` or `bun`, so the
 * path a compiled executable takes can be tried before compiling.
 */
export const SELF_EXEC_ENV = "AIRLOCK_SELF_EXEC";
/** Most levels of self-exec (a worker that starts workers of its own counts one more). */
export const MAX_SELF_EXEC_DEPTH = 4;
/**
 * Variables never passed to a self-exec worker, even when given in `env` or
 * inherited: each makes the executable run something else than the program
 * (`BUN_BE_BUN=1` turns a Bun executable into the `bun` command line).
 */
export const SELF_EXEC_STRIPPED_ENV: readonly string[] = ["BUN_BE_BUN"];

const STATE = Symbol.for("airlock.selfExec");

interface SelfExecState {
  /** Whether this process entered worker mode through the marker. */
  entered: boolean;
  /** Its depth, once entered. */
  depth: number;
}

/** Shared by every copy of airlock in the process (a bundle may hold several). */
function state(): SelfExecState {
  const global = globalThis as unknown as Record<symbol, SelfExecState>;
  global[STATE] ??= { entered: false, depth: 0 };
  return global[STATE];
}

interface DenoLike {
  readonly mainModule: string;
  readonly build: { readonly standalone?: boolean };
  readonly permissions: {
    querySync(descriptor: { name: "env"; variable: string }): {
      readonly state: string;
    };
  };
  readonly env: {
    get(name: string): string | undefined;
    delete(name: string): void;
  };
}

function deno(): DenoLike {
  return (globalThis as unknown as { Deno: DenoLike }).Deno;
}

function bunMain(): string {
  return (globalThis as unknown as { Bun: { main: string } }).Bun.main;
}

/** The runtime, or `undefined` on another one (importing airlock must not throw). */
function runtime(): RuntimeName | undefined {
  try {
    return detectRuntime();
  } catch {
    return undefined;
  }
}

/**
 * Reads a variable of this process without a permission prompt: on Deno,
 * only when reading it is already granted.
 */
function ownEnv(name: string): string | undefined {
  const current = runtime();
  if (current === "bun") return process.env[name];
  if (current === undefined) return undefined;
  try {
    const host = deno();
    const granted = host.permissions.querySync({
      name: "env",
      variable: name,
    }).state === "granted";
    return granted ? host.env.get(name) : undefined;
  } catch {
    return undefined;
  }
}

function deleteOwnEnv(name: string): void {
  try {
    if (runtime() === "bun") delete process.env[name];
    else if (ownEnv(name) !== undefined) deno().env.delete(name);
  } catch {
    // Not permitted: the value stays, and is harmless once entered.
  }
}

/**
 * Whether a path lies in the file system embedded in a `bun build --compile`
 * executable (`/$bunfs/…` on Linux and macOS, `B:\~BUN\…` on Windows), where
 * modules are stored transpiled (`worker.ts` is found as `worker.js`).
 *
 * @param path A path or file URL's path.
 * @returns Whether it is embedded.
 *
 * @example
 * ```ts
 * import { isEmbeddedPath } from "./self_exec.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isEmbeddedPath("/$bunfs/root/workers/db.ts"), true);
 * assert.equal(isEmbeddedPath("/srv/app/workers/db.ts"), false);
 * ```
 */
export function isEmbeddedPath(path: string): boolean {
  return /^\/\$bunfs\/|^[A-Za-z]:[\\/]~BUN[\\/]/.test(path);
}

/**
 * Whether this process runs from a compiled executable: `bun build
 * --compile` (airlock's own code is embedded) or `deno compile`
 * (`Deno.build.standalone`).
 *
 * @returns Whether it is compiled.
 */
export function isCompiled(): boolean {
  const current = runtime();
  if (current === "bun") return /\/\$bunfs\/|\/~BUN\//.test(import.meta.url);
  return current === "deno" && deno().build.standalone === true;
}

/**
 * How workers of this process are started: `"compiled"` (the executable
 * itself), `"forced"` (`AIRLOCK_SELF_EXEC=1`: the entry again, through the
 * runtime) or `undefined` (the usual way, `workers/entry.ts`).
 *
 * @returns The self-exec mode, if any.
 */
export function selfExecMode(): "compiled" | "forced" | undefined {
  if (isCompiled()) return "compiled";
  return ownEnv(SELF_EXEC_ENV) === "1" ? "forced" : undefined;
}

/** What {@linkcode selfExecWorker} found: the worker module to serve. */
export interface SelfExecWorker {
  /** Imports the worker module. */
  load(): Promise<unknown>;
  /** Its display name. */
  label: string;
}

/**
 * Worker side: whether this process was started by self-exec, and if so the
 * module to serve. The first call that finds the marker claims it (clears it
 * from the environment, so programs the worker starts do not inherit it, and
 * records the depth); later calls, from other copies of airlock in the same
 * process, return `undefined`.
 *
 * @returns The worker module, or `undefined` in an ordinary process.
 */
export function selfExecWorker(): SelfExecWorker | undefined {
  const current = state();
  if (current.entered) return undefined;
  const specifier = ownEnv(WORKER_MODULE_ENV);
  if (!specifier) return undefined;
  current.entered = true;
  current.depth = Math.max(1, Number(ownEnv(WORKER_DEPTH_ENV)) || 1);
  deleteOwnEnv(WORKER_MODULE_ENV);
  deleteOwnEnv(WORKER_DEPTH_ENV);
  let label = specifier;
  try {
    label = basename(decodeURIComponent(new URL(specifier).pathname));
  } catch {
    // Not a URL: keep it whole.
  }
  return { label, load: () => import(specifier) };
}

/** What {@linkcode selfExecCommand} needs of the resolved options. */
export interface SelfExecInput {
  /** The user's module. */
  moduleUrl: URL | undefined;
  /** Display name. */
  label: string;
  /** The worker runtime. */
  runtime: RuntimeName;
  /** Resolved permissions. */
  permissions: ResolvedPermissions;
  /** Sandbox mode. */
  sandbox: "none" | "os" | "auto";
  /** Working directory. */
  cwd: string;
  /** Deno config path given by the caller. */
  config: string | undefined;
  /** A custom command (self-exec does not apply). */
  command: readonly string[] | undefined;
  /** A launcher prefix (self-exec does not apply). */
  launcher: readonly string[];
}

/** What the caller of {@linkcode selfExecCommand} knows of airlock's layout. */
export interface SelfExecContext {
  /** The URL of `workers/entry.ts`, whose directories the worker must read under `deno run`. */
  entry: URL;
  /** Deno's project flags (`--config …`) for a directory. */
  projectFlags(start: string): string[];
}

/** A self-exec command, ready to wrap and spawn. */
export interface SelfExecCommand {
  /** The argv. */
  argv: string[];
  /** Whether it is wrapped in bubblewrap (whose environment is then empty). */
  wrapped: boolean;
}

function startError(label: string, detail: string): WorkerStartError {
  return new WorkerStartError({ module: label, failure: "spawn", detail });
}

/** The marker variables added to a worker's `env` grant under `deno run`. */
function withMarkerEnv(permissions: ResolvedPermissions): ResolvedPermissions {
  if (permissions.all || permissions.env === true) return permissions;
  return {
    ...permissions,
    env: [...permissions.env, WORKER_MODULE_ENV, WORKER_DEPTH_ENV],
  };
}

const COMPILED_DENO_UNENFORCED =
  'a program made by deno compile cannot pass Deno\'s permission flags to its workers, which take the permissions it was compiled with; use the OS sandbox (Linux with bubblewrap), grant everything with permissions "all", or accept the compiled-in permissions with permissions.enforce "best-effort"';

/**
 * Parent side: the command of a self-exec worker, or `undefined` when
 * workers of this process start the usual way (not compiled and not forced,
 * a `command` or a `launcher` given, or, when forced, another runtime asked
 * for). Adds the marker to `env` and drops {@linkcode SELF_EXEC_STRIPPED_ENV}.
 *
 * @param input The resolved options.
 * @param adapter The parent's runtime.
 * @param env The worker's environment, completed in place.
 * @param context airlock's entry and Deno's project flags.
 * @returns The command, or `undefined`.
 * @throws {WorkerStartError} when this process is a self-exec child that did
 * not enter worker mode (a loop), when the depth limit is reached, when a
 * compiled program asks for another runtime, or when a `deno compile`d
 * program may not read the marker.
 * @throws {PermissionError} when the permissions cannot be enforced.
 */
export function selfExecCommand(
  input: SelfExecInput,
  adapter: RuntimeAdapter,
  env: Record<string, string>,
  context: SelfExecContext,
): SelfExecCommand | undefined {
  const moduleUrl = input.moduleUrl;
  if (input.command || input.launcher.length > 0 || !moduleUrl) {
    return undefined;
  }
  const mode = selfExecMode();
  if (mode === undefined) return undefined;
  if (input.runtime !== adapter.name) {
    if (mode === "forced") return undefined;
    throw startError(
      input.label,
      `this program is a compiled ${adapter.name} executable, which can start workers only as itself; runtime "${input.runtime}" would need its own binary and airlock's source files: use runtime "auto"`,
    );
  }
  const current = state();
  if (!current.entered && ownEnv(WORKER_MODULE_ENV) !== undefined) {
    throw startError(
      input.label,
      `this process was started as a worker (${WORKER_MODULE_ENV} is set) but ran the program's own code instead of serving the worker, and would start itself again in a loop; import "@airlock/airlock" statically from the program's entry module`,
    );
  }
  const depth = current.entered ? current.depth : 0;
  if (depth >= MAX_SELF_EXEC_DEPTH) {
    throw startError(
      input.label,
      `workers nested ${depth} levels deep reached the self-exec limit (${MAX_SELF_EXEC_DEPTH})`,
    );
  }
  const compiledDeno = mode === "compiled" && adapter.name === "deno";
  if (compiledDeno) {
    for (const name of [WORKER_MODULE_ENV, WORKER_DEPTH_ENV]) {
      const query = deno().permissions.querySync({
        name: "env",
        variable: name,
      });
      if (query.state !== "granted") {
        throw startError(
          input.label,
          `the worker could not read its marker ${name}, and would run the program's main code instead; compile with --allow-env=${WORKER_MODULE_ENV},${WORKER_DEPTH_ENV} (or --allow-env)`,
        );
      }
    }
  }
  for (const name of SELF_EXEC_STRIPPED_ENV) delete env[name];
  env[WORKER_MODULE_ENV] = moduleUrl.href;
  env[WORKER_DEPTH_ENV] = String(depth + 1);

  const binary = adapter.execPath();
  const modulePath = moduleUrl.protocol === "file:"
    ? fileURLToPath(moduleUrl)
    : undefined;
  let argv: string[];
  let code: CodeMounts = { readOnly: [], denoDir: undefined };
  if (mode === "compiled") {
    argv = [binary];
  } else if (adapter.name === "deno") {
    const main = deno().mainModule;
    const mainPath = main.startsWith("file:") ? fileURLToPath(main) : undefined;
    code = codeMounts(input, adapter, context, [mainPath, modulePath]);
    const cache = denoCacheMounts(adapter.environment())?.denoDir;
    if (cache && env.DENO_DIR === undefined) env.DENO_DIR = cache;
    env.DENO_NO_UPDATE_CHECK ??= "1";
    argv = [
      binary,
      "run",
      "--quiet",
      "--no-lock",
      // Every file of a dynamically imported module graph needs read access.
      ...denoPermissionFlags(
        withMarkerEnv(input.permissions),
        code.readOnly.filter((path) => !path.includes(",")),
      ),
      ...(input.config
        ? ["--config", input.config]
        : mainPath
        ? context.projectFlags(dirname(mainPath))
        : []),
      main,
    ];
  } else {
    const mainPath = bunMain();
    code = codeMounts(input, adapter, context, [mainPath, modulePath]);
    argv = [binary, mainPath];
  }

  const decision = sandboxDecision({
    runtime: compiledDeno ? "bun" : adapter.name,
    sandbox: input.sandbox,
    permissions: input.permissions,
    bwrap: locateBwrap(adapter.env("PATH")),
    platform: process.platform,
  });
  if ("error" in decision) {
    throw new PermissionError(
      compiledDeno && decision.permission === "permissions"
        ? COMPILED_DENO_UNENFORCED
        : decision.error,
      { module: input.label, permission: decision.permission },
    );
  }
  const bwrapBinary = locateBwrap(adapter.env("PATH"));
  if (!decision.use || !bwrapBinary) return { argv, wrapped: false };
  if (code.denoDir) env.DENO_DIR = code.denoDir;
  return {
    argv: sandboxedArgv({
      bwrap: bwrapBinary,
      runtimeBinary: binary,
      command: argv,
      readOnly: code.readOnly,
      permissions: input.permissions,
      env,
      cwd: input.cwd,
    }),
    wrapped: true,
  };
}

/** Read-only paths a worker's code needs, and Deno's cache directory. */
interface CodeMounts {
  readOnly: string[];
  denoDir: string | undefined;
}

/**
 * What a worker run through `deno run` or `bun` must read to load the
 * program's entry and the worker module: both module trees, their packages
 * and configs, airlock's code, Deno's caches.
 */
function codeMounts(
  input: SelfExecInput,
  adapter: RuntimeAdapter,
  context: SelfExecContext,
  modules: readonly (string | undefined)[],
): CodeMounts {
  const entry = context.entry.protocol === "file:"
    ? fileURLToPath(context.entry)
    : undefined;
  const environment = adapter.environment();
  const found = new Set<string>();
  let denoDir: string | undefined;
  for (const module of modules) {
    if (module === undefined) continue;
    const mounts = workerMounts({
      runtime: input.runtime,
      module,
      entry,
      config: input.config,
      env: environment,
    });
    for (const path of mounts.readOnly) found.add(path);
    denoDir ??= mounts.denoDir;
  }
  return { readOnly: [...found], denoDir };
}
