/**
 * Self-exec, parent side: the command of a worker of a program compiled
 * into one executable (`bun build --compile`, `deno compile`), which starts
 * itself again with the marker naming the worker module, or, forced with
 * `AIRLOCK_SELF_EXEC=1`, `deno run <entry>` / `bun <entry>`. A depth guard
 * refuses to start when the process is itself a self-exec child that did
 * not enter worker mode, which would otherwise start itself in a loop. The
 * shared marker and the worker side are in `../self_exec.ts`; wrapping (the
 * sandbox, setpriv) is the command builder's, as for every worker.
 *
 * See docs/operations.md, "Single compiled binaries".
 *
 * @module
 */

import { dirname, fileURLToPath } from "../node_builtins.ts";
import { WorkerStartError } from "../../errors.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import {
  bunMain,
  deno,
  MAX_SELF_EXEC_DEPTH,
  ownEnv,
  SELF_EXEC_STRIPPED_ENV,
  selfExecMode,
  selfExecState,
  WORKER_DEPTH_ENV,
  WORKER_MODULE_ENV,
} from "../self_exec.ts";
import type { RuntimeAdapter } from "../types.ts";
import { completeDenoEnv, denoRunArgv } from "./deno_command.ts";
import { workerMounts } from "../sandbox/mounts.ts";
import type { WorkerCommandInput } from "./types.ts";

/**
 * The flags every Bun worker starts with, before its program: no `.env`
 * file (the environment is exactly `env`), and no `bunfig.toml`: Bun reads
 * the one in its working directory and runs its `preload` (resolved against
 * that directory) before the worker's entry, so a worker granted write on a
 * directory that is a later worker's `cwd` would have that worker run its
 * code with the later worker's grants.
 */
export const BUN_WORKER_FLAGS: readonly string[] = [
  "--no-env-file",
  "--config=/dev/null",
];

/** A self-exec command, before wrapping. */
export interface SelfExecCommand {
  /** The argv. */
  argv: string[];
  /** The binary it starts (real path of the executable or runtime). */
  binary: string;
  /** `"compiled"` (the executable itself) or `"forced"` (`deno run` / `bun` of the entry). */
  mode: "compiled" | "forced";
  /** Whether it is a `deno compile`d program (whose permissions are compiled in). */
  compiledDeno: boolean;
  /**
   * What the worker must read to load the program's entry and the worker
   * module under `deno run` / `bun` (empty for a compiled executable).
   */
  readOnly: string[];
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

/**
 * The command of a self-exec worker, or `undefined` when workers of this
 * process start the usual way (not compiled and not forced, a `command` or
 * a `launcher` given, or, when forced, another runtime asked for). Adds the
 * marker to `env` and drops {@linkcode SELF_EXEC_STRIPPED_ENV}.
 *
 * @param input The resolved options.
 * @param adapter The parent's runtime.
 * @param env The worker's environment, completed in place.
 * @param binary The parent's own binary (real path).
 * @param entry The URL of airlock's `workers/entry.ts`, whose code the worker reads under `deno run`.
 * @returns The command, or `undefined`.
 * @throws {WorkerStartError} when this process is a self-exec child that did
 * not enter worker mode (a loop), when the depth limit is reached, when a
 * compiled program asks for another runtime, or when a `deno compile`d
 * program may not read the marker.
 */
export function selfExecCommand(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  env: Record<string, string>,
  binary: string,
  entry: URL,
): SelfExecCommand | undefined {
  const moduleUrl = input.moduleUrl;
  if (input.command || input.launcher !== undefined || !moduleUrl) {
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
  const current = selfExecState();
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

  if (mode === "compiled") {
    return { argv: [binary], binary, mode, compiledDeno, readOnly: [] };
  }
  const modulePath = moduleUrl.protocol === "file:"
    ? fileURLToPath(moduleUrl)
    : undefined;
  const parentEnv = adapter.environment();
  if (adapter.name === "deno") {
    const main = deno().mainModule;
    const mainPath = main.startsWith("file:") ? fileURLToPath(main) : undefined;
    const readOnly = codeMounts(input, entry, parentEnv, [
      mainPath,
      modulePath,
    ]);
    const givenEnv = Object.keys(env);
    completeDenoEnv(env, parentEnv);
    const argv = denoRunArgv({
      binary,
      // Every file of a dynamically imported module graph needs read access.
      permissions: withMarkerEnv(input.permissions),
      extraRead: readOnly.filter((path) => !path.includes(",")),
      givenEnv,
      config: input.config,
      projectDir: mainPath === undefined ? undefined : dirname(mainPath),
      main,
    });
    return { argv, binary, mode, compiledDeno, readOnly };
  }
  const mainPath = bunMain();
  const readOnly = codeMounts(input, entry, parentEnv, [mainPath, modulePath]);
  // The environment is exactly `env`, never the project's .env, and no
  // bunfig.toml of the cwd preloads code (see BUN_WORKER_FLAGS).
  return {
    argv: [binary, ...BUN_WORKER_FLAGS, mainPath],
    binary,
    mode,
    compiledDeno,
    readOnly,
  };
}

/**
 * What a worker run through `deno run` or `bun` must read to load the
 * program's entry and the worker module: both module trees, their packages
 * and configs, airlock's code, Deno's caches.
 */
function codeMounts(
  input: WorkerCommandInput,
  entry: URL,
  parentEnv: Readonly<Record<string, string>>,
  modules: readonly (string | undefined)[],
): string[] {
  const entryPath = entry.protocol === "file:"
    ? fileURLToPath(entry)
    : undefined;
  const found = new Set<string>();
  for (const module of modules) {
    if (module === undefined) continue;
    const mounts = workerMounts({
      runtime: input.runtime,
      module,
      entry: entryPath,
      config: input.config,
      env: parentEnv,
    });
    for (const path of mounts.readOnly) found.add(path);
  }
  return [...found];
}
