/**
 * Which of a sandboxed worker's variables bubblewrap sets inside (those
 * that act before the worker's own code runs) and which reach it through
 * bubblewrap's own environment: no value is on a command line, readable by
 * every process in `/proc/<pid>/cmdline`.
 *
 * @module
 */

/**
 * Variables that act in a program before its own code runs: those the
 * dynamic loader and the C library read in every program (glibc's list of
 * those it ignores in setuid programs, every `LD_*` and `MALLOC_*`) and those
 * a POSIX shell or bash reads at start (the shell that opens bubblewrap's
 * seccomp filter gets bubblewrap's environment).
 */
const STARTUP_VARIABLES: ReadonlySet<string> = new Set([
  "GCONV_PATH",
  "GETCONF_DIR",
  "GLIBC_TUNABLES",
  "HOSTALIASES",
  "LOCALDOMAIN",
  "LOCPATH",
  "NIS_PATH",
  "NLSPATH",
  "RESOLV_HOST_CONF",
  "RES_OPTIONS",
  "TMPDIR",
  "TZDIR",
  "ENV",
  "BASH_ENV",
  "BASHOPTS",
  "SHELLOPTS",
  "CDPATH",
  "GLOBIGNORE",
  "IFS",
  "PS4",
]);

/**
 * Whether a variable of this name acts in the wrappers around a worker
 * (setpriv, the shell, bubblewrap) before the worker's own code runs:
 * `LD_PRELOAD`, `LD_LIBRARY_PATH`, `GCONV_PATH`, `BASH_ENV`, bash's exported
 * functions (`BASH_FUNC_*`), ….
 *
 * @param name The variable's name.
 * @returns Whether it is one.
 *
 * @example
 * ```ts
 * import { isStartupVariable } from "./bwrap_environment.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(isStartupVariable("LD_PRELOAD"), true);
 * assert.equal(isStartupVariable("DB_PASSWORD"), false);
 * ```
 */
export function isStartupVariable(name: string): boolean {
  return name.startsWith("LD_") || name.startsWith("MALLOC_") ||
    name.startsWith("BASH_FUNC_") || STARTUP_VARIABLES.has(name);
}

/**
 * The environment to start bubblewrap (and its parent-death guard) with,
 * for a worker whose environment is `env`: every variable but those that act at start
 * ({@linkcode isStartupVariable}), which `bwrapArgv()` sets inside
 * the sandbox instead. bubblewrap passes its environment on to the worker,
 * so together they give it exactly `env` (bubblewrap adds `PWD`), and no
 * value is on a command line.
 *
 * @param env The worker's whole environment.
 * @returns The environment to spawn bubblewrap with.
 *
 * @example
 * ```ts
 * import { bwrapEnvironment } from "./bwrap_environment.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(
 *   bwrapEnvironment({ DB_PASSWORD: "s", LD_PRELOAD: "/x.so" }),
 *   { DB_PASSWORD: "s" },
 * );
 * ```
 */
export function bwrapEnvironment(
  env: Readonly<Record<string, string>>,
): Record<string, string> {
  const kept: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (!isStartupVariable(name)) kept[name] = value;
  }
  return kept;
}
