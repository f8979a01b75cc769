/**
 * The one launch path of a worker. First the command (`inner_command.ts`:
 * the runtime with its flags, airlock's entry and the user's module; or, in
 * a compiled program, the executable itself: self-exec; or a user's
 * `command`). Then the wrappers, innermost first: the OS sandbox
 * (src/runtime/sandbox/: its plan, then Landlock and bubblewrap), the
 * parent-death guard (`setpriv --pdeathsig KILL`). The result carries the argv and
 * environment to spawn, the exit mapper of its wrappers and how to find the
 * worker's real pid below them; with a launcher, the transport that starts
 * that command elsewhere instead (transport.ts: an argv prefix is one).
 *
 * @module
 */

import {
  dirname,
  isAbsolute,
  join,
  readFileSync,
  realpathSync,
  relative,
} from "../node_builtins.ts";
import { PermissionError } from "../../errors.ts";
import type { RuntimeAdapter } from "../types.ts";
import { exitAsIs } from "./exit.ts";
import { DEFAULT_PATH, linuxTool, lookupDenied } from "./lookups.ts";
import {
  executionFiles,
  isExecutableFile,
  recordWorkerWritable,
  resolveRunNames,
  trustedRealPath,
  writableByWorker,
} from "./executable.ts";
import { denoCacheMounts } from "../sandbox/mounts.ts";
import { codeCacheDir, LOCATION_DATA, prepareCodeCache } from "./code_cache.ts";
import type {
  ExitMapper,
  LaunchStep,
  WorkerCommand,
  WorkerCommandInput,
  WrappedStep,
  Wrapper,
} from "./types.ts";
import type { SandboxBackend } from "../sandbox/types.ts";
import { setprivWrapper } from "./wrappers.ts";
import { commandTransport, type WorkerTransport } from "./transport.ts";
import { hostFactsSteps } from "../sandbox/facts.ts";
import { resolveGrantPaths } from "../sandbox/grant_links.ts";
import { sandboxPlan, type SandboxRequest } from "../sandbox/plan.ts";
import {
  entryFlag,
  type InnerCommand,
  innerCommand,
  workerEntryUrl,
} from "./inner_command.ts";
import { CHMOD_FALLBACK_FLAG } from "../../worker/chmod_fallback.ts";
import { sandboxWrappers } from "../sandbox/wrappers.ts";
import { limitsLaunch } from "../sandbox/limits/launch.ts";
import { SANDBOX_MESSAGES } from "../sandbox/messages.ts";
import { type NetBroker, startNetBroker } from "../sandbox/net/broker.ts";
import { netRelay } from "../sandbox/net/relay.ts";
import { runSteps, runStepsYielding, type Steps } from "../turns.ts";
import type { NetLayout } from "../sandbox/net/targets.ts";
import type { PidNamespaceTools } from "../sandbox/pid_namespace.ts";

/**
 * How a sandboxed Deno worker gets its private code cache: read-only (every
 * worker), or writable (the warm-up start that fills it, with no grants).
 */
export type CodeCacheMode = "read-only" | "warm-up";

/**
 * What the start of a worker begins while its command is still being
 * built, called once the build knows it: the holder of the shared pid
 * namespace the worker joins (its programs).
 */
export type StartAhead = (pidNamespace: PidNamespaceTools) => void;

/** Whether a write grant of a worker of this process covers `dir` (or its real path). */
function cacheWritableByWorker(dir: string): boolean {
  if (writableByWorker(dir) !== undefined) return true;
  // Its nearest existing ancestor, resolved: a grant may name a link to it.
  let path = dir;
  while (true) {
    try {
      return writableByWorker(join(realpathSync(path), relative(path, dir))) !==
        undefined;
    } catch {
      const up = dirname(path);
      if (up === path) return false;
      path = up;
    }
  }
}

/**
 * Gives a sandboxed Deno worker its private code cache as `DENO_DIR` (see
 * code_cache.ts): read-only (the parent warms it first: launch/warm_up.ts);
 * writable for the warm-up itself. Leaves the parent's (read-only module caches, nothing
 * cached between starts: slower, equally confined) when the parent has no
 * cache directory or may not create one.
 *
 * @returns The cache directory and whether the worker may write it, or
 *   `undefined`.
 */
function useCodeCache(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  inner: InnerCommand,
  mode: CodeCacheMode,
): { dir: string; writable: boolean } | undefined {
  if (inner.denoModule === undefined || inner.binary === undefined) {
    return undefined;
  }
  const parentDenoDir = denoCacheMounts(adapter.environment())?.denoDir;
  if (parentDenoDir === undefined) return undefined;
  const dir = codeCacheDir(parentDenoDir, {
    binary: inner.binary,
    module: inner.denoModule,
    entry: workerEntryUrl().href,
    config: input.config,
  });
  // A worker of this process granted write on the cache (a grant covering
  // it: DENO_DIR, ~/.cache, $HOME) could plant code there that later workers
  // run with their own grants: then no worker of this process uses it (none
  // warms or marks it either), as for the Bun bundle. (A worker that may
  // write everywhere, `write: true` or "all", may as well rewrite the worker
  // modules and airlock itself: it is trusted as the parent is.)
  if (cacheWritableByWorker(dir)) return undefined;
  try {
    prepareCodeCache(dir, parentDenoDir);
  } catch {
    return undefined;
  }
  inner.step.env.DENO_DIR = dir;
  inner.step.scratch = [join(dir, LOCATION_DATA)];
  if (mode === "warm-up") {
    inner.step.writable = [dir];
    return { dir, writable: true };
  }
  inner.codeCache = dir;
  inner.step.readOnly = [...inner.step.readOnly, dir];
  return { dir, writable: false };
}

/**
 * The sandbox wrappers a worker gets, or none: the host facts, the one
 * decision (`sandbox/plan.ts`), then the wrappers it names. Throws when
 * its permissions cannot be enforced here.
 */
function* confinement(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  inner: InnerCommand,
  codeCacheMode: CodeCacheMode,
  setpriv: string | undefined,
  ahead: StartAhead | undefined,
): Steps<Wrapper[]> {
  const request: SandboxRequest = {
    module: input.label,
    // A command has no permission model of its own, like Bun.
    runtime: inner.runtime ?? "command",
    sandbox: input.sandbox,
    permissions: input.permissions,
    local: input.launcher === undefined,
    compiledDeno: inner.compiledDeno,
    // The warm-up start shares no data with the workers.
    sharePids: codeCacheMode !== "warm-up",
  };
  const plan = sandboxPlan(
    request,
    yield* hostFactsSteps(request, {
      adapter,
      input,
      binary: inner.binary,
      runtime: inner.runtime,
    }),
  );
  if (!plan.confined || inner.binary === undefined) return [];
  // Landlock alone: seccomp refuses chmod by path, which a Bun worker's
  // entry then retries through a descriptor (loading node:fs for it costs
  // a Bun start ~8 ms, so only where it is needed; Deno's is free).
  if (plan.bwrap === undefined) entryFlag(inner, CHMOD_FALLBACK_FLAG);
  yield;
  const grants = resolveGrantPaths(
    input.permissions,
    input.label,
    adapter.env("HOME"),
  );
  yield;
  const programs = runPrograms(input, inner);
  yield;
  const codeCache = useCodeCache(input, adapter, inner, codeCacheMode);
  yield;
  if (plan.net !== undefined) {
    inner.network = netBroker(
      input.label,
      plan.net,
      adapter,
      plan.step?.program === "native" ? plan.bwrap : undefined,
    );
  }
  const wrappers = sandboxWrappers(plan, {
    module: input.label,
    permissions: input.permissions,
    cwd: input.cwd,
    binary: inner.binary,
    codeCache: codeCache === undefined
      ? undefined
      : { ...codeCache, scratch: join(codeCache.dir, LOCATION_DATA) },
    onExit: (callback) => adapter.onExit(callback),
    ...(inner.network === undefined ? {} : { network: inner.network }),
    grants,
    programs,
    setpriv,
  });
  if (wrappers.length === 0) return [];
  const joined = wrappers.find((wrapper) => wrapper.pidNamespace)?.pidNamespace;
  if (joined !== undefined) ahead?.({ ...joined, setpriv });
  yield;
  const code = inner.codeMounts?.();
  if (code !== undefined) {
    inner.step.readOnly = [...inner.step.readOnly, ...code.readOnly];
    inner.step.listOnly = [...(inner.step.listOnly ?? []), ...code.listOnly];
  }
  return wrappers;
}

/**
 * Starts the broker of a worker's forwarded network (closed when the
 * worker is gone, and at the latest when this process exits): with the
 * native relay (started by `bwrap`) where the native confine step runs,
 * else with the forwarder the runtime step starts.
 *
 * @throws {PermissionError} when its private directory cannot be had.
 */
function netBroker(
  module: string,
  layout: NetLayout,
  adapter: RuntimeAdapter,
  bwrap: string | undefined,
): NetBroker {
  let broker: NetBroker;
  try {
    broker = startNetBroker({
      module,
      layout,
      ...(bwrap === undefined ? {} : { relay: netRelay(adapter, bwrap) }),
    });
  } catch (error: unknown) {
    throw new PermissionError(
      SANDBOX_MESSAGES.netBroker(
        error instanceof Error ? error.message : String(error),
      ),
      { module, permission: "net", cause: error },
    );
  }
  adapter.onExit(() => broker.close());
  return broker;
}

/**
 * What a sandboxed worker may execute, resolved at start: its runtime
 * binary (or a command's program), each `run` name as found on the
 * worker's PATH, each `run` path, and the interpreters of each (`ld.so`,
 * a script's `#!`). Landlock gives execute on these files only; bubblewrap
 * mounts the names' files (where found, and their real paths) instead of
 * the whole program directories.
 */
function runPrograms(
  input: WorkerCommandInput,
  inner: InnerCommand,
): { executables: string[]; mounts: string[] } {
  const binary = inner.binary ?? "";
  const path = inner.step.env.PATH ?? DEFAULT_PATH;
  const denied = lookupDenied(input.label, "a granted program", "sandbox");
  const executables = executionFiles(binary, path, denied);
  if (!executables.includes(binary)) executables.unshift(binary);
  const mounts: string[] = [];
  const run = input.permissions.run;
  if (run !== true) {
    const names = run.filter((entry) => !entry.includes("/"));
    for (const program of resolveRunNames(names, path, denied)) {
      mounts.push(program.found, ...program.files);
      executables.push(...program.files);
    }
    for (const entry of run.filter((entry) => isAbsolute(entry))) {
      // A granted program a worker of this process may have planted (or
      // may swap for a link) is refused, as a run name's is.
      if (isExecutableFile(entry, denied)) trustedRealPath(entry, denied);
      executables.push(...executionFiles(entry, path, denied));
    }
  }
  return {
    executables: [...new Set(executables)],
    mounts: [...new Set(mounts)],
  };
}

/**
 * The pid `levels` generations below `pid`, following each process's first
 * child (`/proc/<pid>/task/<pid>/children`, Linux).
 *
 * @param pid The spawned process.
 * @param levels How many generations down.
 * @returns The descendant's pid, or `undefined` when it cannot be read.
 */
export function descendantPid(pid: number, levels: number): number | undefined {
  let current = pid;
  for (let level = 0; level < levels; level++) {
    let children: string;
    try {
      children = readFileSync(
        `/proc/${current}/task/${current}/children`,
        "utf8",
      );
    } catch {
      return undefined;
    }
    const first = Number(children.trim().split(/\s+/)[0]);
    if (!Number.isInteger(first) || first <= 0) return undefined;
    current = first;
  }
  return current;
}

/**
 * Builds the command of a worker process: the runtime and its flags (Deno
 * permission flags, config), airlock's entry and the user's module, wrapped
 * in the OS sandbox when it applies and in `setpriv --pdeathsig KILL` so the
 * worker dies with its parent even when blocked in synchronous code; or,
 * with a launcher, the command its transport is asked to start elsewhere.
 *
 * @param input The resolved options.
 * @param adapter The parent's runtime.
 * @param codeCacheMode How a sandboxed Deno worker gets its private code
 *   cache: `"read-only"` (workers), `"warm-up"` (the start that fills it).
 * @returns The command.
 * @throws {WorkerStartError} when the worker's runtime binary or program is
 * missing or refused (`failure: "spawn"`).
 * @throws {PermissionError} when the permissions cannot be enforced here.
 */
export function buildWorkerCommand(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  codeCacheMode: CodeCacheMode = "read-only",
): WorkerCommand {
  return runSteps(buildWorkerCommandSteps(input, adapter, codeCacheMode));
}

/**
 * {@linkcode buildWorkerCommand}, giving the event loop a turn whenever a
 * slice of the build ran `SLICE_MS` (turns.ts; the first build of a
 * process reads files, loads code and looks programs up for the first
 * time; a later one does not wait at all).
 *
 * @param input The resolved options.
 * @param adapter The parent's runtime.
 * @param codeCacheMode As for {@linkcode buildWorkerCommand}.
 * @param ahead What to begin while the build goes on (a spawn follows it).
 * @returns The command.
 * @throws {WorkerStartError} as {@linkcode buildWorkerCommand} does.
 * @throws {PermissionError} as {@linkcode buildWorkerCommand} does.
 */
export function buildWorkerCommandYielding(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  codeCacheMode: CodeCacheMode = "read-only",
  ahead?: StartAhead,
): Promise<WorkerCommand> {
  return runStepsYielding(
    buildWorkerCommandSteps(input, adapter, codeCacheMode, ahead),
  );
}

/**
 * The build of {@linkcode buildWorkerCommand} as steps: it `yield`s
 * between its parts (lookups, the inner command, each part of the
 * confinement, the limits, each wrapper), where the event loop may run.
 *
 * @param input The resolved options.
 * @param adapter The parent's runtime.
 * @param codeCacheMode As for {@linkcode buildWorkerCommand}.
 * @param ahead As for {@linkcode buildWorkerCommandYielding}.
 * @returns The steps; their result is the command.
 * @throws {WorkerStartError} as {@linkcode buildWorkerCommand} does.
 * @throws {PermissionError} as {@linkcode buildWorkerCommand} does.
 */
export function* buildWorkerCommandSteps(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
  codeCacheMode: CodeCacheMode,
  ahead?: StartAhead,
): Steps<WorkerCommand> {
  const permissions = input.permissions;
  if (!permissions.all && permissions.write !== true) {
    recordWorkerWritable(permissions.write);
  }
  const env: Record<string, string> = { NO_COLOR: "1", ...input.env };
  const local = input.launcher === undefined;
  // Granted program names are looked up on the worker's PATH (Deno resolves
  // --allow-run names at start and refuses to start without one): a worker
  // given none gets the default, the PATH they are resolved on.
  const run = permissions.run;
  if (
    local && env.PATH === undefined && !permissions.all && run !== true &&
    run.some((entry) => !entry.includes("/"))
  ) env.PATH = DEFAULT_PATH;
  // AIRLOCK_NO_PDEATHSIG=1 (tests): run as on a system without setpriv.
  const setpriv = local && adapter.env("AIRLOCK_NO_PDEATHSIG") !== "1"
    ? linuxTool(
      "setpriv",
      adapter,
      lookupDenied(input.label, "setpriv (the parent-death guard)", "sandbox"),
    )
    : undefined;
  // Without a parent-death signal the worker watches its parent itself.
  const parentWatchdog = !local || setpriv === undefined;
  yield;
  const inner = innerCommand(input, adapter, env, parentWatchdog);
  yield;
  const wrappers = yield* confinement(
    input,
    adapter,
    inner,
    codeCacheMode,
    setpriv,
    ahead,
  );
  yield;
  // Outside the sandbox, inside the parent-death guard: the worker's
  // groups, rlimits and oom_score_adj hold before anything of it runs.
  const limits = limitsLaunch(input, adapter);
  if (limits.wrapper !== undefined) wrappers.push(limits.wrapper);
  // No guard around a worker that dies with the parent by other means
  // (the shared pid namespace: Wrapper.diesWithParent).
  if (
    setpriv !== undefined && !wrappers.some((wrapper) => wrapper.diesWithParent)
  ) {
    wrappers.push(setprivWrapper(setpriv));
  }

  let wrapped: Wrapped;
  try {
    wrapped = yield* wrapAll(inner.step, wrappers, input.label);
  } catch (error: unknown) {
    limits.limits.release();
    throw error;
  }
  const { step, mapExit, levels, pidNamespace } = wrapped;
  return {
    module: input.label,
    spawn: {
      argv: step.argv,
      env: step.env,
      cwd: input.cwd,
      ...(step.extraInput === undefined ? {} : { extraInput: step.extraInput }),
    },
    local,
    wrappers: wrappers.map((wrapper) => wrapper.name).reverse(),
    sandboxes: wrappers.map((wrapper) => wrapper.name).reverse().filter((
      name,
    ): name is SandboxBackend => name === "bwrap" || name === "landlock"),
    mapExit,
    limits: limits.limits,
    workerPid: (spawnPid) =>
      local ? descendantPid(spawnPid, levels) : undefined,
    ...(inner.codeCache !== undefined && codeCacheMode === "read-only"
      ? { codeCache: inner.codeCache }
      : {}),
    ...(inner.network === undefined ? {} : { network: inner.network }),
    ...(input.launcher === undefined
      ? {}
      : { transport: transportOf(input.launcher, adapter) }),
    ...(pidNamespace === undefined
      ? {}
      : { pidNamespace: { ...pidNamespace, setpriv } }),
  };
}

/** The worker's step wrapped by each wrapper, and what the wrappers say of it. */
interface Wrapped {
  step: LaunchStep;
  /** Maps the spawned process's exit through every wrapper, outermost first. */
  mapExit: ExitMapper;
  /** Processes between the spawned one and the worker. */
  levels: number;
  pidNamespace: WrappedStep["pidNamespace"];
}

/**
 * Wraps `inner` in each wrapper, innermost first (a turn after each).
 *
 * @throws {Error} when an embedded program is left that no sandbox makes.
 */
function* wrapAll(
  inner: LaunchStep,
  wrappers: readonly Wrapper[],
  label: string,
): Steps<Wrapped> {
  let step: LaunchStep = inner;
  const mappers: ExitMapper[] = [];
  let levels = 0;
  let pidNamespace: WrappedStep["pidNamespace"];
  for (const wrapper of wrappers) {
    const wrapped = wrapper.wrap(step);
    if (wrapped.mapExit) mappers.unshift(wrapped.mapExit);
    levels += wrapped.levels ?? 0;
    pidNamespace = wrapped.pidNamespace ?? pidNamespace;
    // What the worker must write reaches every outer sandbox.
    // An embedded program travels out to the sandbox that makes it
    // (which hands back its bytes as the spawn's descriptor 3).
    const extraInput = wrapped.extraInput ?? step.extraInput;
    const embedded = wrapped.extraInput !== undefined
      ? undefined
      : wrapped.embedded ?? step.embedded;
    step = {
      ...wrapped,
      writable: wrapped.writable ?? step.writable ?? [],
      scratch: wrapped.scratch ?? step.scratch ?? [],
      ...(extraInput === undefined ? {} : { extraInput }),
      ...(embedded === undefined ? {} : { embedded }),
    };
    yield;
  }
  if (step.embedded !== undefined) {
    throw new Error(
      `Cannot start worker "${label}": no sandbox makes the program ${step.embedded.path}`,
    );
  }
  const mapExit: ExitMapper = mappers.length === 0
    ? exitAsIs
    : (code, signal) => {
      let status = { code, signal };
      for (const map of mappers) status = map(status.code, status.signal);
      return status;
    };
  return { step, mapExit, levels, pidNamespace };
}

/**
 * The transport of a launcher: itself, or the one of an argv prefix, which
 * spawns through the parent's runtime.
 *
 * @param launcher The launcher.
 * @param adapter The parent's runtime.
 * @returns The transport.
 */
function transportOf(
  launcher: readonly string[] | WorkerTransport,
  adapter: RuntimeAdapter,
): WorkerTransport {
  if (!isPrefix(launcher)) return launcher;
  return commandTransport(launcher, (request) => adapter.spawn(request));
}

function isPrefix(
  launcher: readonly string[] | WorkerTransport,
): launcher is readonly string[] {
  return Array.isArray(launcher);
}
