/**
 * Builds the command line of a worker process: the runtime with its flags,
 * airlock's entry and the user's module, wrapped in the OS sandbox and a
 * parent-death guard where available, or a user-given command and launcher.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { basename, delimiter, dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { PermissionError, WorkerStartError } from "../errors.ts";
import type { RuntimeAdapter, RuntimeName, SpawnRequest } from "./types.ts";
import { signalName } from "./_signals.ts";
import { selfExecCommand } from "./self_exec.ts";
import {
  denoPermissionFlags,
  type ResolvedPermissions,
} from "./permissions.ts";
import {
  locateBwrap,
  sandboxDecision,
  sandboxedArgv,
  workerMounts,
} from "./sandbox.ts";

/** A worker command, ready to spawn. */
export interface WorkerCommand {
  /** The worker module's (or command's) display name, for messages. */
  module: string;
  /** What to spawn. */
  spawn: SpawnRequest;
  /** Whether the worker runs on this machine (its pid can be inspected). */
  local: boolean;
  /** Maps the spawned process's exit status to the worker's (undoes a wrapper's 128 + N). */
  mapExit(
    code: number | null,
    signal: string | null,
  ): { code: number | null; signal: string | null };
}

/** How a worker runtime is started, by name. */
export interface RuntimeLaunch {
  /** The runtime binary. */
  binary: string;
  /** Which runtime it is. */
  runtime: RuntimeName;
}

/**
 * The URL of `workers/entry.ts` (or `.js` where airlock was installed as
 * transpiled JavaScript), computed in this one place.
 *
 * @returns The entry's URL.
 */
export function workerEntryUrl(): URL {
  const here = import.meta.url;
  const extension = here.endsWith(".js") ? "js" : "ts";
  return new URL(`../../workers/entry.${extension}`, here);
}

/**
 * Finds an executable on PATH or in `node_modules/.bin` of a directory or its
 * ancestors.
 *
 * @param name The program's name.
 * @param path The PATH value.
 * @param from Directories whose `node_modules/.bin` (walking up) to search.
 * @returns The path found, or `undefined`.
 */
export function findExecutable(
  name: string,
  path: string | undefined,
  from: readonly string[],
): string | undefined {
  for (const dir of (path ?? "").split(delimiter)) {
    if (!dir) continue;
    const candidate = join(dir, name);
    if (existsSync(candidate)) return candidate;
  }
  for (const start of from) {
    let dir = start;
    while (true) {
      const candidate = join(dir, "node_modules", ".bin", name);
      if (existsSync(candidate)) return candidate;
      const parent = join(dir, "..");
      if (parent === dir) break;
      dir = parent;
    }
  }
  return undefined;
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
 * Maps an exit status through a wrapper that reports a child killed by
 * signal N as exit code 128 + N (bubblewrap, ssh, shells).
 *
 * @param code The wrapper's exit code.
 * @param signal The wrapper's signal.
 * @returns The worker's exit status.
 */
export function exitThroughWrapper(
  code: number | null,
  signal: string | null,
): { code: number | null; signal: string | null } {
  if (signal === null && code !== null && code > 128 && code < 160) {
    const name = signalName(code - 128);
    if (name) return { code: null, signal: name };
  }
  return { code, signal };
}

/**
 * Whether a path is a file: URL's file that exists.
 *
 * @param url The module URL.
 * @returns Whether it exists (true for non-file URLs, which are not checked).
 */
export function moduleExists(url: URL): boolean {
  if (url.protocol !== "file:") return true;
  return existsSync(fileURLToPath(url));
}

/**
 * Quotes one argument for a POSIX shell: unchanged when it holds only
 * characters no shell treats specially, else in single quotes (a single
 * quote inside becomes `'\''`).
 *
 * @param arg The argument.
 * @returns The argument as a shell word.
 */
export function shellQuote(arg: string): string {
  if (/^[A-Za-z0-9_@%+:,./-]+$/.test(arg)) return arg;
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * Whether a launcher hands the worker command to a remote shell as one line
 * (ssh joins the arguments after the host with spaces), so that each
 * argument must be quoted. `docker exec`, `kubectl exec` and the like pass
 * the argv through as it is.
 *
 * @param launcher The launcher prefix.
 * @returns Whether the worker argv is shell-quoted.
 */
export function launcherUsesShell(launcher: readonly string[]): boolean {
  return basename(launcher[0] ?? "") === "ssh";
}

/** What {@linkcode buildWorkerCommand} needs of the resolved options. */
export interface WorkerCommandInput {
  /** The user's module, or `undefined` with `command`. */
  moduleUrl: URL | undefined;
  /** Display name. */
  label: string;
  /** The worker runtime. */
  runtime: RuntimeName;
  /** Resolved permissions. */
  permissions: ResolvedPermissions;
  /** Sandbox mode. */
  sandbox: "none" | "os" | "auto";
  /** The worker's environment (as the user gave it). */
  env: Record<string, string>;
  /** Working directory. */
  cwd: string;
  /** Deno config path. */
  config: string | undefined;
  /** A custom command instead of a module. */
  command: string[] | undefined;
  /** A launcher prefix. */
  launcher: string[];
}

const runtimeBinaries = new Map<string, string>();

function runtimeBinary(
  runtime: RuntimeName,
  adapter: RuntimeAdapter,
  input: WorkerCommandInput,
): string {
  if (runtime === adapter.name) return adapter.execPath();
  const cached = runtimeBinaries.get(runtime);
  if (cached) return cached;
  const from = [adapter.cwd()];
  if (input.moduleUrl?.protocol === "file:") {
    from.push(dirname(fileURLToPath(input.moduleUrl)));
  }
  const found = findExecutable(runtime, adapter.env("PATH"), from);
  if (!found) {
    throw new WorkerStartError({
      module: input.label,
      failure: "spawn",
      detail:
        `the ${runtime} binary was not found on PATH nor in node_modules/.bin; install it (npm install --save-dev ${runtime}) or choose another runtime`,
    });
  }
  runtimeBinaries.set(runtime, found);
  return found;
}

/**
 * The Deno flags that make a worker module resolve its imports as in its
 * own project: walking up from the module's directory, the first directory
 * holding a `deno.json`, `deno.jsonc` or `package.json` is the project. Its
 * `deno.json(c)` is passed with `--config`; a project with only a
 * `package.json` gets `--node-modules-dir=manual`, so bare specifiers and
 * `#` subpath imports resolve from its `package.json` and `node_modules`
 * (the worker's main module is a `data:` URL, from which Deno would not
 * discover either).
 *
 * @param start The module's directory.
 * @returns The flags (empty when the module belongs to no project).
 */
export function denoProjectFlags(start: string): string[] {
  let dir = start;
  while (true) {
    for (const name of ["deno.json", "deno.jsonc"]) {
      const candidate = join(dir, name);
      if (existsSync(candidate)) return ["--config", candidate];
    }
    if (existsSync(join(dir, "package.json"))) {
      return ["--node-modules-dir=manual"];
    }
    const parent = dirname(dir);
    if (parent === dir) return [];
    dir = parent;
  }
}

function denoDir(adapter: RuntimeAdapter): string | undefined {
  const explicit = adapter.env("DENO_DIR");
  if (explicit) return explicit;
  const cache = adapter.env("XDG_CACHE_HOME") ??
    (adapter.env("HOME")
      ? join(adapter.env("HOME") ?? "", ".cache")
      : undefined);
  return cache ? join(cache, "deno") : undefined;
}

let setprivPath: string | null | undefined;

function setpriv(adapter: RuntimeAdapter): string | undefined {
  // Test-only: run as on a system without setpriv (the watchdog takes over).
  if (adapter.env("AIRLOCK_NO_PDEATHSIG") === "1") return undefined;
  if (setprivPath === undefined) {
    setprivPath = process.platform === "linux"
      ? findExecutable("setpriv", adapter.env("PATH") ?? "/usr/bin:/bin", []) ??
        null
      : null;
  }
  return setprivPath ?? undefined;
}

/**
 * Builds the command of a worker process: the runtime and its flags (Deno
 * permission flags, config), airlock's entry and the user's module, wrapped
 * in the OS sandbox when it applies and in `setpriv --pdeathsig KILL` so the
 * worker dies with its parent even when blocked in synchronous code.
 *
 * @param input The resolved options.
 * @param adapter The parent's runtime.
 * @returns The command.
 * @throws {WorkerStartError} when the worker's runtime binary is missing.
 * @throws {PermissionError} when the permissions cannot be enforced here.
 */
export function buildWorkerCommand(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
): WorkerCommand {
  const env: Record<string, string> = { NO_COLOR: "1", ...input.env };
  let argv: string[];
  let wrapped = false;
  // Without a parent-death signal the worker watches its parent itself.
  const parentWatchdog = input.launcher.length > 0 || !setpriv(adapter);
  // A compiled executable (or AIRLOCK_SELF_EXEC=1) starts itself as the worker.
  const self = input.command
    ? undefined
    : selfExecCommand(input, adapter, env, {
      entry: workerEntryUrl(),
      projectFlags: denoProjectFlags,
    });
  if (input.command) {
    argv = [...input.command];
  } else if (self) {
    argv = self.argv;
    wrapped = self.wrapped;
  } else {
    const moduleUrl = input.moduleUrl;
    if (!moduleUrl) throw new TypeError("Cannot build worker: no module");
    const binary = runtimeBinary(input.runtime, adapter, input);
    const entry = workerEntryUrl();
    if (input.runtime === "deno") {
      const dir = denoDir(adapter);
      if (dir && env.DENO_DIR === undefined) env.DENO_DIR = dir;
      env.DENO_NO_UPDATE_CHECK ??= "1";
      const project = input.config
        ? ["--config", input.config]
        : moduleUrl.protocol === "file:"
        ? denoProjectFlags(dirname(fileURLToPath(moduleUrl)))
        : [];
      argv = [
        binary,
        "run",
        "--quiet",
        "--no-lock",
        ...denoPermissionFlags(input.permissions, []),
        ...project,
        denoMainModule(entry, moduleUrl, input.label, parentWatchdog),
      ];
    } else {
      argv = [binary, fileURLToPath(entry), moduleUrl.href];
      if (parentWatchdog) argv.push("--parent-watchdog");
    }
    // Through a launcher the sandbox is the remote side's job: bwrap's
    // mounts would name this machine's paths.
    const plan = input.launcher.length === 0
      ? planSandbox(input, adapter, binary, argv, env)
      : undefined;
    if (plan) {
      argv = plan;
      wrapped = true;
    }
  }
  if (input.launcher.length > 0) {
    const remote = launcherUsesShell(input.launcher)
      ? argv.map(shellQuote)
      : argv;
    return {
      module: input.label,
      spawn: { argv: [...input.launcher, ...remote], env, cwd: input.cwd },
      local: false,
      mapExit: exitThroughWrapper,
    };
  }
  const guard = setpriv(adapter);
  if (guard) argv = [guard, "--pdeathsig", "KILL", "--", ...argv];
  return {
    module: input.label,
    // Inside the sandbox, bwrap sets the worker's environment itself.
    spawn: { argv, env: wrapped ? {} : env, cwd: input.cwd },
    local: true,
    mapExit: wrapped
      ? exitThroughWrapper
      : (code, signal) => ({ code, signal }),
  };
}

/**
 * Wraps a worker command in bubblewrap when the sandbox applies (see
 * `sandboxDecision`), or refuses permissions nothing can enforce here.
 */
function planSandbox(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  binary: string,
  argv: string[],
  env: Record<string, string>,
): string[] | undefined {
  const bwrap = locateBwrap(adapter.env("PATH"));
  const decision = sandboxDecision({
    runtime: input.runtime,
    sandbox: input.sandbox,
    permissions: input.permissions,
    bwrap,
    platform: process.platform,
  });
  if ("error" in decision) {
    throw new PermissionError(decision.error, {
      module: input.label,
      permission: decision.permission,
    });
  }
  if (!decision.use || !bwrap) return undefined;
  const moduleUrl = input.moduleUrl;
  const entry = workerEntryUrl();
  const mounts = workerMounts({
    runtime: input.runtime,
    module: moduleUrl?.protocol === "file:"
      ? fileURLToPath(moduleUrl)
      : undefined,
    entry: entry.protocol === "file:" ? fileURLToPath(entry) : undefined,
    config: input.config,
    env: { ...adapter.environment(), ...env },
  });
  if (mounts.denoDir) env.DENO_DIR = mounts.denoDir;
  return sandboxedArgv({
    bwrap,
    runtimeBinary: binary,
    command: argv,
    readOnly: mounts.readOnly,
    permissions: input.permissions,
    env,
    cwd: input.cwd,
  });
}
