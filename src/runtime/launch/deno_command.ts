/**
 * The one Deno command line of a worker: `deno run` with airlock's fixed
 * flags, the permission flags, the project flags and the main module, and
 * the one Deno environment (`DENO_DIR`, no update check). Used for module
 * workers and for self-exec under `deno run`. Private to src/runtime.
 *
 * @module
 */

import { dirname, existsSync, isAbsolute, join } from "../node_builtins.ts";
import {
  dedupe,
  PERMISSION_KINDS,
  type ResolvedPermissions,
} from "../permissions.ts";
import { describe } from "../../_validate.ts";
import { denoCacheMounts } from "../sandbox/mounts.ts";

/**
 * Deno's permission flags for resolved permissions: `["-A"]` for `"all"`,
 * otherwise `--no-prompt` followed by one `--allow-<kind>[=<scopes>]` per
 * granted kind. Nothing granted gives `["--no-prompt"]`.
 *
 * The environment follows one rule on both runtimes: a variable given to
 * the worker is readable without a grant, and one not given is absent
 * (`undefined`, never a throw). So unless `env` is granted wholesale, the
 * given names join `--allow-env`, and `--ignore-env` makes every other name
 * read as `undefined` (Deno would throw `NotCapable`); this also hides what
 * Deno and airlock add to a worker's environment (`DENO_DIR`, Deno's `PATH`
 * shim) unless given.
 *
 * @param permissions The resolved permissions.
 * @param extraRead Paths the worker must read besides its grants (merged into
 * `--allow-read` unless read is granted wholesale). A worker started through
 * a `data:` main module that imports its module statically needs none: see
 * docs/permissions.md.
 * @param givenEnv The names of the environment variables the worker is given
 * (its `env` and `inheritEnv`).
 * @returns The flags, to put between `deno run` and the main module.
 * @throws {RangeError} when an extra read path is relative or contains a
 * comma, or a given variable name is empty or contains a comma.
 *
 * @example
 * ```ts
 * import { denoPermissionFlags } from "./deno_command.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * const resolved = resolvePermissions(
 *   { read: ["./data"], net: ["localhost:8080"], env: true },
 *   "/app",
 * );
 * assert.deepEqual(denoPermissionFlags(resolved, []), [
 *   "--no-prompt",
 *   "--allow-read=/app/data",
 *   "--allow-net=localhost:8080",
 *   "--allow-env",
 * ]);
 * assert.deepEqual(denoPermissionFlags(resolvePermissions("all", "/"), []), ["-A"]);
 * assert.deepEqual(
 *   denoPermissionFlags(resolvePermissions({ env: ["HOME"] }, "/"), [], ["TOKEN"]),
 *   ["--no-prompt", "--allow-env=HOME,TOKEN", "--ignore-env"],
 * );
 * ```
 */
export function denoPermissionFlags(
  permissions: ResolvedPermissions,
  extraRead: readonly string[],
  givenEnv: readonly string[] = [],
): string[] {
  if (permissions.all) return ["-A"];
  givenEnv.forEach((name) => {
    if (typeof name !== "string" || name === "" || name.includes(",")) {
      throw new RangeError(
        `Invalid option "env": the variable name ${
          describe(name)
        } cannot be granted to a Deno worker (--allow-env cannot express an empty name or a comma)`,
      );
    }
  });
  extraRead.forEach((path, index) => {
    if (typeof path !== "string" || !isAbsolute(path) || path.includes(",")) {
      throw new RangeError(
        `Invalid extra read path [${index}]: expected an absolute path without a comma, received ${
          describe(path)
        }`,
      );
    }
  });
  const flags = ["--no-prompt"];
  for (const kind of PERMISSION_KINDS) {
    let scopes = permissions[kind];
    if (kind === "read" && scopes !== true && extraRead.length > 0) {
      scopes = dedupe([...scopes, ...extraRead]);
    }
    if (kind === "env" && scopes !== true && givenEnv.length > 0) {
      scopes = dedupe([...scopes, ...givenEnv]);
    }
    if (scopes === true) flags.push(`--allow-${kind}`);
    else if (scopes.length > 0) {
      flags.push(`--allow-${kind}=${scopes.join(",")}`);
    }
  }
  if (permissions.env !== true) flags.push("--ignore-env");
  return flags;
}

/**
 * The source of the main module a Deno worker runs: a `data:` module that
 * statically names both airlock's entry and the user's module, so Deno loads
 * them without any read permission, and imports the user's module through an
 * analysable dynamic import, so a module that throws at import is reported
 * as such.
 *
 * @param entry The entry's URL.
 * @param module The user's module URL.
 * @param label The module's display name.
 * @param parentWatchdog Whether the worker starts its parent-death watchdog.
 * @returns A `data:` URL.
 */
export function denoMainModule(
  entry: URL,
  module: URL,
  label: string,
  parentWatchdog = false,
): string {
  const source = `import { runEntry } from ${JSON.stringify(entry.href)};\n` +
    `await runEntry(() => import(${JSON.stringify(module.href)}), ${
      JSON.stringify(label)
    }${parentWatchdog ? ", { parentWatchdog: true }" : ""});\n`;
  return `data:application/typescript,${encodeURIComponent(source)}`;
}

/**
 * The file that makes a worker module's project: walking up from the
 * module's directory, the first `deno.json`, `deno.jsonc` or `package.json`.
 *
 * @param start The module's directory.
 * @returns Its path, or `undefined` when the module belongs to no project.
 */
export function denoProjectFile(start: string): string | undefined {
  let dir = start;
  while (true) {
    for (const name of ["deno.json", "deno.jsonc", "package.json"]) {
      const candidate = join(dir, name);
      if (existsSync(candidate)) return candidate;
    }
    const parent = dirname(dir);
    if (parent === dir) return undefined;
    dir = parent;
  }
}

/**
 * The Deno flags that make a worker module resolve its imports as in its
 * own project ({@linkcode denoProjectFile}): a `deno.json(c)` is passed
 * with `--config`; a project with only a `package.json` gets
 * `--node-modules-dir=manual`, so bare specifiers and `#` subpath imports
 * resolve from its `package.json` and `node_modules` (the worker's main
 * module is a `data:` URL, from which Deno would not discover either).
 *
 * @param start The module's directory.
 * @returns The flags (empty when the module belongs to no project).
 */
function denoProjectFlags(start: string): string[] {
  const file = denoProjectFile(start);
  if (file === undefined) return [];
  return file.endsWith("/package.json")
    ? ["--node-modules-dir=manual"]
    : ["--config", file];
}

/** Options of {@linkcode denoRunArgv}. */
export interface DenoRunOptions {
  /** The Deno binary (real path). */
  binary: string;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** Paths the worker must read besides its grants (self-exec's module trees). */
  extraRead: readonly string[];
  /** The names of the variables the worker is given: readable without a grant. */
  givenEnv: readonly string[];
  /** The `config` option, if given. */
  config: string | undefined;
  /** The directory whose project flags apply when no config is given, if any. */
  projectDir: string | undefined;
  /** The main module (a `data:` URL, or the program's entry). */
  main: string;
}

/**
 * The argv of a Deno worker: `deno run --quiet --no-lock`, the permission
 * flags, `--config` or the project's flags, the main module.
 *
 * @param options The binary, permissions, project and main module.
 * @returns The argv.
 *
 * @example
 * ```ts
 * import { denoRunArgv } from "./deno_command.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(
 *   denoRunArgv({
 *     binary: "/opt/deno",
 *     permissions: resolvePermissions(undefined, "/app"),
 *     extraRead: [],
 *     givenEnv: [],
 *     config: "/app/deno.json",
 *     projectDir: undefined,
 *     main: "file:///app/main.ts",
 *   }),
 *   ["/opt/deno", "run", "--quiet", "--no-lock", "--no-prompt", "--ignore-env", "--config", "/app/deno.json", "file:///app/main.ts"],
 * );
 * ```
 */
export function denoRunArgv(options: DenoRunOptions): string[] {
  return [
    options.binary,
    "run",
    "--quiet",
    "--no-lock",
    ...denoPermissionFlags(
      options.permissions,
      options.extraRead,
      options.givenEnv,
    ),
    ...(options.config !== undefined
      ? ["--config", options.config]
      : options.projectDir !== undefined
      ? denoProjectFlags(options.projectDir)
      : []),
    options.main,
  ];
}

/**
 * Completes a Deno worker's environment in place: `DENO_DIR` (unless given)
 * from the parent's (`DENO_DIR`, `XDG_CACHE_HOME`, `HOME`), without which a
 * worker with no HOME refuses to start, no update check, and no `node` shim
 * on PATH.
 *
 * @param env The worker's environment, completed in place.
 * @param parentEnv The parent's environment.
 */
export function completeDenoEnv(
  env: Record<string, string>,
  parentEnv: Readonly<Record<string, string | undefined>>,
): void {
  const cache = denoCacheMounts(parentEnv)?.denoDir;
  if (cache !== undefined && env.DENO_DIR === undefined) env.DENO_DIR = cache;
  env.DENO_NO_UPDATE_CHECK ??= "1";
  // Deno 2.9 otherwise prepends its `node` shim directory to PATH in every
  // process whose DENO_DIR it may write: the worker's PATH is the one given.
  env.DENO_DISABLE_NODE_SHIM ??= "1";
}
