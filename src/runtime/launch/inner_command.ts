/**
 * The command of a worker before the wrappers of `command.ts`: the runtime
 * with its flags, airlock's entry and the user's module; in a compiled
 * program, the executable itself (self-exec); or a user's `command`.
 *
 * @module
 */

import {
  basename,
  dirname,
  fileURLToPath,
  isAbsolute,
  join,
  statSync,
} from "../node_builtins.ts";
import { WorkerStartError } from "../../errors.ts";
import { bunEntryBundle } from "../bun_entry.ts";
import type { RuntimeAdapter, RuntimeName } from "../types.ts";
import {
  completeDenoEnv,
  denoMainModule,
  denoRunArgv,
} from "./deno_command.ts";
import { DEFAULT_PATH, lookupDenied, runtimeBinary } from "./lookups.ts";
import { resolveProgram, writableByWorker } from "./executable.ts";
import { projectRoot, workerMounts } from "../sandbox/mounts.ts";
import { BUN_WORKER_FLAGS, selfExecCommand } from "./self_exec_command.ts";
import type { LaunchStep, WorkerCommandInput } from "./types.ts";
import type { NetBroker } from "../sandbox/net/broker.ts";

/**
 * The URL of `workers/entry.ts` (or `.js` where airlock was installed as
 * transpiled JavaScript), computed in this one place.
 *
 * @returns The entry's URL.
 */
export function workerEntryUrl(): URL {
  const here = import.meta.url;
  const extension = here.endsWith(".js") ? "js" : "ts";
  return new URL(`../../../workers/entry.${extension}`, here);
}

/** What a worker's code needs besides its grants (see `LaunchStep`). */
export interface CodeMounts {
  /** Paths mounted read-only. */
  readOnly: readonly string[];
  /** Directories whose entries may be listed, nothing more. */
  listOnly: readonly string[];
}

/**
 * The URL of `workers/bun_loader.ts` (or `.js`), beside the entry: what a
 * Bun worker runs when the entry is pre-bundled.
 *
 * @param entry The entry's URL, from {@linkcode workerEntryUrl}.
 * @returns The loader's URL.
 */
function bunLoaderUrl(entry: URL): URL {
  const extension = entry.pathname.endsWith(".js") ? "js" : "ts";
  return new URL(`bun_loader.${extension}`, entry);
}

/** The command before wrapping, and what the sandbox decision needs of it. */
export interface InnerCommand {
  /** The command, its environment and its code's mounts. */
  step: LaunchStep;
  /** The runtime binary the command starts, when it is airlock's worker. */
  binary: string | undefined;
  /** The runtime whose confinement rules apply (`undefined`: a `command`). */
  runtime: RuntimeName | undefined;
  /** Mount discovery for the worker's code (module workers). */
  codeMounts: (() => CodeMounts) | undefined;
  /** A `deno compile`d self-exec program. */
  compiledDeno: boolean;
  /** For a worker run by `deno run`: the module Deno runs, for its private code cache. */
  denoModule?: string;
  /** The private code cache the worker reads (set by `useCodeCache()` in command.ts). */
  codeCache?: string;
  /** The broker of the worker's forwarded network (`host:port` grants under bubblewrap). */
  network?: NetBroker;
  /**
   * Whether its argv ends with airlock's Bun entry (or its loader) and
   * the entry's flags, so that the build may add one (`entryFlag()`).
   */
  bunEntry?: boolean;
}

/**
 * Adds a flag of airlock's Bun entry (`workers/entry.ts`) to an inner
 * command that runs it; other commands are left as they are.
 *
 * @param inner The command.
 * @param flag The flag.
 */
export function entryFlag(inner: InnerCommand, flag: string): void {
  if (inner.bunEntry !== true || inner.step.argv.includes(flag)) return;
  inner.step.argv = [...inner.step.argv, flag];
}

/**
 * The command of a worker before any wrapper: a user's `command` (its
 * program looked up here unless a launcher runs it), a self-exec program,
 * or the runtime with its flags, airlock's entry and the module.
 *
 * @throws {WorkerStartError} when the program or runtime binary is
 *   missing or refused (`failure: "spawn"`).
 */
export function innerCommand(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  env: Record<string, string>,
  parentWatchdog: boolean,
): InnerCommand {
  if (input.command) return userCommand(input.command, input, adapter, env);
  const entry = workerEntryUrl();
  const self = input.moduleUrl === undefined ? undefined : selfExecCommand(
    input,
    adapter,
    env,
    runtimeBinary(adapter.name, adapter, input),
    entry,
  );
  if (self) {
    return {
      step: { argv: self.argv, env, readOnly: self.readOnly },
      binary: self.binary,
      // A deno compile'd program cannot pass Deno's flags to its workers:
      // only the sandbox confines them, as for Bun.
      runtime: self.compiledDeno ? "bun" : adapter.name,
      codeMounts: () => ({ readOnly: self.readOnly, listOnly: [] }),
      compiledDeno: self.compiledDeno,
      ...(self.mode === "forced" && adapter.name === "deno"
        ? { denoModule: input.moduleUrl?.href ?? "" }
        : {}),
    };
  }
  return moduleCommand(input, adapter, env, parentWatchdog, entry);
}

/** A user's `command`: its program as found on the worker's PATH. */
function userCommand(
  command: readonly string[],
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  env: Record<string, string>,
): InnerCommand {
  const [program = "", ...rest] = command;
  if (input.launcher !== undefined) {
    // The program runs on the launcher's side: nothing to look up here.
    return {
      step: { argv: [...command], env, readOnly: [] },
      binary: undefined,
      runtime: undefined,
      codeMounts: undefined,
      compiledDeno: false,
    };
  }
  const resolved = resolveProgram(
    program,
    input.cwd,
    env.PATH ?? adapter.env("PATH") ?? DEFAULT_PATH,
    lookupDenied(
      input.label,
      `the command's program "${program}"`,
      "runtime",
    ),
  );
  if ("missing" in resolved) {
    throw new WorkerStartError({
      module: input.label,
      failure: "spawn",
      detail: `cannot run the command: ${resolved.missing}`,
    });
  }
  return {
    step: { argv: [resolved.path, ...rest], env, readOnly: [] },
    binary: resolved.path,
    runtime: undefined,
    codeMounts: () => ({
      readOnly: commandMounts(resolved.path, rest, input.cwd),
      listOnly: [],
    }),
    compiledDeno: false,
  };
}

/** A module worker: `deno run` with its flags, or Bun with the entry (or its bundle). */
function moduleCommand(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  env: Record<string, string>,
  parentWatchdog: boolean,
  entry: URL,
): InnerCommand {
  const moduleUrl = input.moduleUrl;
  if (!moduleUrl) throw new TypeError("Cannot build worker: no module");
  const binary = runtimeBinary(input.runtime, adapter, input);
  let argv: string[];
  /** The pre-bundled worker entry a Bun worker runs, if any. */
  let bunBundle: string | undefined;
  if (input.runtime === "deno") {
    const givenEnv = Object.keys(env);
    completeDenoEnv(env, adapter.environment());
    argv = denoRunArgv({
      binary,
      permissions: input.permissions,
      extraRead: [],
      givenEnv,
      config: input.config,
      projectDir: moduleUrl.protocol === "file:"
        ? dirname(fileURLToPath(moduleUrl))
        : undefined,
      main: denoMainModule(entry, moduleUrl, input.label, parentWatchdog),
    });
  } else {
    ({ argv, bundle: bunBundle } = bunArgv(
      binary,
      entry,
      moduleUrl,
      adapter,
      parentWatchdog,
    ));
  }
  const codeMounts = (): CodeMounts =>
    workerMounts({
      runtime: input.runtime,
      module: moduleUrl.protocol === "file:"
        ? fileURLToPath(moduleUrl)
        : undefined,
      entry: entry.protocol === "file:" ? fileURLToPath(entry) : undefined,
      config: input.config,
      env: { ...adapter.environment(), ...env },
    });
  return {
    // Bun reads the bundle's directory to resolve it: the directory holds
    // only bundles of airlock's code.
    step: {
      argv,
      env,
      readOnly: bunBundle === undefined ? [] : [dirname(bunBundle)],
    },
    binary,
    runtime: input.runtime,
    codeMounts,
    compiledDeno: false,
    ...(input.runtime === "deno"
      ? { denoModule: moduleUrl.href }
      : { bunEntry: true }),
  };
}

/**
 * A Bun worker's argv: the loader with the pre-bundled entry (which it
 * checks against the bundle's hash), or the entry itself.
 *
 * @returns The argv, and the bundle's file when it runs one.
 */
function bunArgv(
  binary: string,
  entry: URL,
  moduleUrl: URL,
  adapter: RuntimeAdapter,
  parentWatchdog: boolean,
): { argv: string[]; bundle: string | undefined } {
  // No .env, no bunfig.toml (BUN_WORKER_FLAGS): the worker's environment
  // is exactly `env`, and no file of its cwd preloads code.
  const entryPath = fileURLToPath(entry);
  let bundle = bunEntryBundle(
    binary,
    entryPath,
    adapter.environment(),
    (callback) => adapter.onExit(callback),
  );
  // A bundle where a worker of this process may write (a grant covering
  // the cache directory) could hold that worker's code, which this worker
  // would run with its own grants: run the entry itself.
  if (
    bundle !== undefined &&
    writableByWorker(dirname(bundle.file)) !== undefined
  ) {
    bundle = undefined;
  }
  // The loader checks the bundle's bytes against the hash and runs them.
  const argv = bundle === undefined
    ? [binary, ...BUN_WORKER_FLAGS, entryPath, moduleUrl.href]
    : [
      binary,
      ...BUN_WORKER_FLAGS,
      fileURLToPath(bunLoaderUrl(entry)),
      bundle.file,
      bundle.sha256,
      moduleUrl.href,
    ];
  if (parentWatchdog) argv.push("--parent-watchdog");
  return { argv, bundle: bundle?.file };
}

/**
 * What a `command` worker reads besides its grants: the installation of its
 * program (`<prefix>` of `<prefix>/bin/<program>`, unless that is a system
 * prefix whose libraries are mounted anyway) and the project of every file
 * its arguments name (the script, a worker library). A relative argument
 * names a file as the program will open it: against the worker's `cwd`
 * (`["python3", "vendor/airlock_worker.py", "workers/db.py"]`).
 */
function commandMounts(
  program: string,
  args: readonly string[],
  cwd: string,
): string[] {
  const mounts = new Set<string>();
  const bin = dirname(program);
  if (basename(bin) === "bin") {
    const prefix = dirname(bin);
    if (!["/", "/usr", "/usr/local"].includes(prefix)) mounts.add(prefix);
  }
  for (const arg of args) {
    if (arg === "" || arg.startsWith("-")) continue;
    const path = isAbsolute(arg) ? arg : join(cwd, arg);
    try {
      if (statSync(path).isFile()) mounts.add(projectRoot(dirname(path)));
    } catch {
      // Not a file: an argument like any other.
    }
  }
  return [...mounts];
}
