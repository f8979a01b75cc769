/**
 * Self-exec: workers of a program compiled into one executable
 * (`bun build --compile`, `deno compile`). Such a program has no runtime
 * binary and no airlock source files on disk to start `workers/entry.ts`
 * with, so the executable starts itself again with an environment marker
 * naming the worker module. `mod.ts`, which the program imports before its
 * own main code runs, sees the marker (in `self_exec_boot.ts`), serves that
 * module, and never lets the program's main code run (a top-level `await`
 * that does not settle until the worker process exits).
 *
 * This file holds what both sides share (the marker, the mode, the depth)
 * and the worker side: {@linkcode selfExecWorker} reads and clears the
 * marker. The parent side, which builds the command, is
 * `launch/self_exec_command.ts`.
 *
 * See docs/operations.md, "Single compiled binaries".
 *
 * @module
 */

import { basename, process } from "./node_builtins.ts";
import { detectRuntime } from "./detect.ts";
import type { RuntimeName } from "./types.ts";

/** The marker: set in a self-exec worker's environment to the URL of the module it serves. */
export const WORKER_MODULE_ENV = "AIRLOCK_WORKER_MODULE";
/** How many levels of self-exec a worker is below the first program (1 for its child). */
export const WORKER_DEPTH_ENV = "AIRLOCK_WORKER_DEPTH";
/**
 * Set to `1` in a program's environment to use self-exec although it is not
 * compiled: the program's entry is run again with `deno run` or `bun`, so the
 * path a compiled executable takes can be tried before compiling.
 */
const SELF_EXEC_ENV = "AIRLOCK_SELF_EXEC";
/** Most levels of self-exec (a worker that starts workers of its own counts one more). */
export const MAX_SELF_EXEC_DEPTH = 4;
/**
 * Variables never passed to a self-exec worker, even when given in `env` or
 * inherited: each makes the executable run something else than the program
 * (`BUN_BE_BUN=1` turns a Bun executable into the `bun` command line).
 */
export const SELF_EXEC_STRIPPED_ENV: readonly string[] = ["BUN_BE_BUN"];

const STATE = Symbol.for("airlock.selfExec");

/** What {@linkcode selfExecState} knows. */
export interface SelfExecState {
  /** Whether this process entered worker mode through the marker. */
  entered: boolean;
  /** Its depth, once entered. */
  depth: number;
}

/**
 * Whether this process entered worker mode through the marker, and its
 * depth. Shared by every copy of airlock in the process (a bundle may hold
 * several).
 *
 * @returns The state (live: later entries update it).
 */
export function selfExecState(): SelfExecState {
  const global = globalThis as unknown as Record<symbol, SelfExecState>;
  global[STATE] ??= { entered: false, depth: 0 };
  return global[STATE];
}

/** The members of `Deno` self-exec uses. */
export interface DenoLike {
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

/**
 * The `Deno` global, typed structurally (call only on Deno).
 *
 * @returns It.
 */
export function deno(): DenoLike {
  return (globalThis as unknown as { Deno: DenoLike }).Deno;
}

/**
 * The path of the program's entry on Bun (`Bun.main`; call only on Bun).
 *
 * @returns The path.
 */
export function bunMain(): string {
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
 *
 * @param name The variable.
 * @returns Its value, or `undefined` when unset or not readable.
 */
export function ownEnv(name: string): string | undefined {
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
  const current = selfExecState();
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
