/**
 * The host facts the sandbox decides on, gathered in this one place: the
 * platform, whether bubblewrap is installed and can run here (not only
 * installed: user namespaces may be forbidden by Docker's default seccomp
 * profile, Ubuntu's AppArmor restriction or
 * `kernel.unprivileged_userns_clone=0`), and whether the confine step can
 * run and what the kernel offers it (Landlock ABI, seccomp). Each probe
 * runs once per process and binary, ahead of the first start and off the
 * event loop ({@linkcode prefetchHostFacts}); `plan.ts` decides from the
 * facts.
 *
 * @module
 */

import { loadSpawnBuiltins, process, realpathSync } from "../node_builtins.ts";
import {
  recordWorkerWritable,
  writableByWorker,
} from "../launch/executable.ts";
import { linuxTool, lookupDenied, runtimeBinary } from "../launch/lookups.ts";
import type { WorkerCommandInput } from "../launch/types.ts";
import type { RuntimeAdapter, RuntimeName } from "../types.ts";
import { isCompiled } from "../self_exec.ts";
import { bwrapArgv, bwrapProbeArgv } from "./bwrap.ts";
import {
  type ConfineRunner,
  confineStepArgv,
  type ConfineSupport,
} from "./confine_command.ts";
import { stepEnvironment, stepReadOnly } from "./confine_wrapper.ts";
import { denoCacheMounts } from "./mounts.ts";
import { SANDBOX_MESSAGES as SAYS } from "./messages.ts";
import {
  type BwrapFact,
  type ConfineStepFact,
  type HostFacts,
  needsHostFacts,
  type SandboxRequest,
} from "./plan.ts";
import { seccompArch } from "./seccomp.ts";
import {
  NATIVE_CONFINE_PATH,
  nativeConfineElf,
  RUNTIME_CONFINE_STEP_ENV,
} from "./native_step.ts";
import {
  forgetMachineProbes,
  keepMachineProbe,
  machineProbe,
  probeKeySteps,
} from "./probe_cache.ts";
import {
  type ProbeCommand,
  ProbeNeeded,
  type ProbeRun,
  runProbe,
  runProbeSync,
} from "./_probe_run.ts";
import { runSteps, runStepsYielding, type Steps } from "../turns.ts";

/** What {@linkcode bwrapUsable} found. */
export type BwrapUsability =
  | { readonly usable: true }
  | { readonly usable: false; readonly reason: string };

const bwrapProbes = new Map<string, BwrapUsability>();

/**
 * The answers this process read from the machine's probe cache
 * (probe_cache.ts), by bwrap binary or step runner: each forgets its
 * answer here.
 */
const fromMachine = new Map<string, () => void>();

/**
 * Forgets the probe answers kept on this machine and those this process
 * read from there (a start failed in a sandbox wrapper: one may be stale):
 * the next start probes again.
 */
export function forgetMachineFacts(): void {
  for (const forget of fromMachine.values()) forget();
  fromMachine.clear();
  forgetMachineProbes();
}

function bwrapProbeCommand(bwrap: string): ProbeCommand {
  return { argv: bwrapProbeArgv(bwrap, bwrap), env: {} };
}

function bwrapProbeResult(run: ProbeRun): BwrapUsability {
  if (run.status === 0) return { usable: true };
  const said = run.stderr.trim().split("\n").at(-1);
  return {
    usable: false,
    reason: run.error?.message ?? (said ||
      `it exited with code ${run.status}, signal ${run.signal}`),
  };
}

/**
 * Whether bubblewrap runs here with a worker's namespaces (asked once per
 * bubblewrap binary), by running `bwrap --version` inside an empty sandbox
 * with those namespaces (bubblewrap itself as the program: Deno's
 * `node:child_process` rewrites an argument list that names the Deno
 * binary).
 *
 * @param bwrap The bubblewrap binary (real path).
 * @returns Usable, or why not (bubblewrap's own words).
 *
 * @example
 * ```ts ignore
 * import { bwrapUsable } from "./facts.ts";
 *
 * const found = bwrapUsable("/usr/bin/bwrap");
 * if (!found.usable) console.error(found.reason);
 * ```
 */
export function bwrapUsable(bwrap: string): BwrapUsability {
  return runSteps(bwrapFactSteps(bwrap, false, undefined));
}

function* bwrapFactSteps(
  bwrap: string,
  cachedOnly: boolean,
  native: Uint8Array | undefined,
): Steps<BwrapUsability> {
  const cached = bwrapProbes.get(bwrap);
  if (cached) return cached;
  // Kept on this machine (probe_cache.ts): with the native step, the one
  // probe's answer for bubblewrap and the kernel; else bubblewrap's.
  const command = native === undefined
    ? bwrapProbeCommand(bwrap)
    : nativeProbeCommand(bwrap, native);
  yield;
  const key = yield* probeKeySteps(
    native === undefined ? "bwrap" : "step",
    command,
  );
  const kept = machineProbe(native === undefined ? "bwrap" : "step", key);
  yield;
  if (kept !== undefined) {
    const usable: BwrapUsability = { usable: true };
    bwrapProbes.set(bwrap, usable);
    if (native !== undefined) {
      const support = kept as ConfineSupport;
      nativeProbes.set(bwrap, {
        landlockAbi: support.landlockAbi,
        seccomp: support.seccomp,
      });
    }
    fromMachine.set(bwrap, () => {
      bwrapProbes.delete(bwrap);
      nativeProbes.delete(bwrap);
    });
    return usable;
  }
  const keep = (found: BwrapUsability, nativeRun: ProbeRun | undefined) => {
    if (native === undefined) keepMachineProbe("bwrap", key, found);
    else if (nativeRun?.status === 0) {
      keepMachineProbe("step", key, stepProbeResult(nativeRun));
    }
  };
  if (cachedOnly) {
    throw new ProbeNeeded(async () => {
      const nativeRun = native === undefined
        ? undefined
        : await runProbe(nativeProbeCommand(bwrap, native));
      const found = nativeRun !== undefined && nativeRun.status === 0
        ? { usable: true as const }
        : bwrapProbeResult(await runProbe(bwrapProbeCommand(bwrap)));
      if (bwrapProbes.has(bwrap)) return;
      bwrapProbes.set(bwrap, found);
      if (nativeRun !== undefined) noteNativeProbe(bwrap, nativeRun);
      keep(found, nativeRun);
    });
  }
  let found: BwrapUsability | undefined;
  let nativeRun: ProbeRun | undefined;
  try {
    // One process answers for bubblewrap, the native step's delivery and
    // the kernel; only a failure asks bubblewrap alone why.
    if (native !== undefined) {
      nativeRun = runProbeSync(nativeProbeCommand(bwrap, native));
      noteNativeProbe(bwrap, nativeRun);
      if (nativeRun.status === 0) found = { usable: true };
    }
    found ??= bwrapProbeResult(runProbeSync(bwrapProbeCommand(bwrap)));
  } catch (error: unknown) {
    found = {
      usable: false,
      reason: error instanceof Error ? error.message : String(error),
    };
  }
  bwrapProbes.set(bwrap, found);
  keep(found, nativeRun);
  return found;
}

/**
 * What the native confine step's probe answered inside bubblewrap, by
 * bubblewrap binary: the kernel's support (the step then needs no probe
 * of its own, a runtime start), or why it failed (the runtime step then
 * confines, probed as before).
 */
const nativeProbes = new Map<string, ConfineSupport>();

function noteNativeProbe(bwrap: string, run: ProbeRun): void {
  nativeProbes.set(bwrap, stepProbeResult(run));
}

/**
 * The native confine step's probe: bubblewrap with a worker's namespaces
 * makes the step from the bytes on its stdin (as it makes a worker's from
 * descriptor 3) and runs `--probe` there, so that one process says that
 * bubblewrap runs, that the file it makes is executable, and what the
 * kernel offers.
 */
function nativeProbeCommand(bwrap: string, elf: Uint8Array): ProbeCommand {
  return {
    argv: bwrapArgv({
      bwrap,
      runtimeBinary: bwrap,
      command: [NATIVE_CONFINE_PATH, "--probe"],
      readOnly: [],
      read: [],
      write: [],
      net: false,
      env: {},
      cwd: "/",
      embedded: { fd: "0", path: NATIVE_CONFINE_PATH },
    }),
    env: {},
    input: elf,
  };
}

const stepProbes = new Map<string, ConfineSupport>();

function stepProbeCommand(
  runner: ConfineRunner,
  env: Readonly<Record<string, string>>,
): ProbeCommand {
  return {
    argv: confineStepArgv(runner, "--probe"),
    env: { ...env },
    cwd: "/",
  };
}

function stepProbeResult(run: ProbeRun): ConfineSupport {
  let parsed: Partial<ConfineSupport> | undefined;
  try {
    parsed = run.status === 0
      ? JSON.parse(run.stdout.trim()) as Partial<ConfineSupport>
      : undefined;
  } catch (error: unknown) {
    return {
      landlockAbi: 0,
      seccomp: false,
      error: SAYS.stepProbeFailed(
        error instanceof Error ? error.message : String(error),
      ),
    };
  }
  if (
    parsed && Number.isInteger(parsed.landlockAbi) &&
    typeof parsed.seccomp === "boolean"
  ) {
    return {
      landlockAbi: parsed.landlockAbi as number,
      seccomp: parsed.seccomp,
    };
  }
  const why = run.error?.message ??
    (run.stderr.trim().split("\n").at(-1) ||
      `exit code ${run.status}, signal ${run.signal}`);
  return { landlockAbi: 0, seccomp: false, error: SAYS.stepProbeFailed(why) };
}

/**
 * What the kernel offers the confine step, asked once per runner binary by
 * running the step with `--probe` (about one runtime start). Not Linux: no
 * Landlock, no seccomp, without running anything.
 *
 * @param runner The runtime that will run the step.
 * @param env The environment to probe with (Deno needs `DENO_DIR` or `HOME`).
 * @returns The support found; `error` says why the probe failed.
 */
export function probeConfineSupport(
  runner: ConfineRunner,
  env: Readonly<Record<string, string>>,
): ConfineSupport {
  return runSteps(stepSupportSteps(runner, env, false));
}

function* stepSupportSteps(
  runner: ConfineRunner,
  env: Readonly<Record<string, string>>,
  cachedOnly: boolean,
): Steps<ConfineSupport> {
  if (process.platform !== "linux") {
    return {
      landlockAbi: 0,
      seccomp: false,
      error: SAYS.stepNeedsLinux(process.platform),
    };
  }
  const key = `${runner.runtime}:${runner.binary}`;
  const cached = stepProbes.get(key);
  if (cached) return cached;
  const machineKey = yield* probeKeySteps(
    "step",
    stepProbeCommand(runner, env),
  );
  const kept = machineProbe("step", machineKey) as ConfineSupport | undefined;
  yield;
  if (kept !== undefined) {
    const support: ConfineSupport = {
      landlockAbi: kept.landlockAbi,
      seccomp: kept.seccomp,
    };
    stepProbes.set(key, support);
    fromMachine.set(key, () => stepProbes.delete(key));
    return support;
  }
  if (cachedOnly) {
    throw new ProbeNeeded(async () => {
      const found = stepProbeResult(
        await runProbe(stepProbeCommand(runner, env)),
      );
      if (!stepProbes.has(key)) stepProbes.set(key, found);
      keepMachineProbe("step", machineKey, found);
    });
  }
  let support: ConfineSupport;
  try {
    support = stepProbeResult(runProbeSync(stepProbeCommand(runner, env)));
  } catch (error: unknown) {
    support = {
      landlockAbi: 0,
      seccomp: false,
      error: SAYS.stepProbeFailed(
        error instanceof Error ? error.message : String(error),
      ),
    };
  }
  stepProbes.set(key, support);
  keepMachineProbe("step", machineKey, support);
  return support;
}

function realPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/**
 * Whether the confine step can run on `runner` here, and what the kernel
 * offers it: the step must have a runtime, the seccomp filter a system
 * call table for this architecture, the step its cache, none of its code,
 * runtime or cache may lie under a worker's write grant (it runs before any
 * confinement), and its probe must succeed. In steps: a turn may come
 * between the paths it checks.
 *
 * @param runner The runtime to run the step, or why there is none.
 * @param parentEnv The parent's environment.
 * @param parentDenoDir The parent's Deno cache directory, when known.
 * @param cachedOnly Only a cached probe answers (a prefetch).
 * @param known What the kernel offers, when the native step's probe
 *   inside bubblewrap said it (no runtime step probe then).
 * @returns The fact.
 */
function* confineStepFactSteps(
  runner: ConfineRunner | { none: string },
  parentEnv: Readonly<Record<string, string>>,
  parentDenoDir: string | undefined,
  cachedOnly: boolean,
  known: ConfineSupport | undefined,
): Steps<ConfineStepFact> {
  if ("none" in runner) return { unavailable: runner.none, refused: false };
  if (seccompArch(process.arch) === undefined) {
    return { unavailable: SAYS.noSyscallTable(), refused: false };
  }
  const stepEnv = stepEnvironment(runner, parentDenoDir);
  if ("error" in stepEnv) return { unavailable: stepEnv.error, refused: false };
  // The step runs before any confinement: code a worker could have changed
  // (its own or another's write grant) must never run there.
  for (const path of stepReadOnly(runner, stepEnv)) {
    yield;
    const grant = writableByWorker(realPath(path));
    if (grant !== undefined) {
      return {
        unavailable: SAYS.stepUnderWriteGrant(path, grant),
        refused: true,
      };
    }
  }
  yield;
  const support = known ?? (yield* stepSupportSteps(runner, {
    PATH: parentEnv.PATH ?? "/usr/bin:/bin",
    ...stepEnv,
  }, cachedOnly));
  if (support.error !== undefined) {
    return { unavailable: support.error, refused: true };
  }
  return {
    runner,
    stepEnv,
    support: { landlockAbi: support.landlockAbi, seccomp: support.seccomp },
  };
}

/** What {@linkcode hostFacts} needs besides the request. */
export interface HostFactsOptions {
  /** The parent's runtime. */
  adapter: RuntimeAdapter;
  /** The worker's resolved options. */
  input: WorkerCommandInput;
  /** The binary the worker's command starts (`undefined`: none on this machine). */
  binary: string | undefined;
  /** The worker's runtime (`undefined`: a `command`, whose step runs on the parent's). */
  runtime: RuntimeName | undefined;
  /**
   * Only cached probes answer; a missing one throws for
   * {@linkcode prefetchHostFacts} to make without blocking.
   *
   * @default {false}
   */
  cachedOnly?: boolean;
}

/**
 * Gathers what {@linkcode sandboxPlan} decides on for one worker: nothing
 * when the request needs no sandbox (permissions `"all"`, `sandbox:
 * "none"`, a launcher), else bubblewrap (looked up and probed) and, on
 * Linux, the confine step (it runs on the worker's own runtime binary, or
 * the parent's for a `command`; a compiled program has none).
 *
 * @param request The worker's resolved options, as the plan takes them.
 * @param options The adapter, the options and the worker's binary.
 * @returns The facts.
 * @throws {PermissionError} when bubblewrap cannot be looked up.
 */
export function hostFacts(
  request: SandboxRequest,
  options: HostFactsOptions,
): HostFacts {
  return runSteps(hostFactsSteps(request, options));
}

/**
 * {@linkcode hostFacts} as steps (`turns.ts`): it `yield`s between its
 * lookups, the probe cache's key and read, and the confine step's checks,
 * where the event loop may run (the first start's prefetch and build).
 *
 * @param request The worker's resolved options, as the plan takes them.
 * @param options The adapter, the options and the worker's binary.
 * @returns The steps; their result is the facts.
 * @throws {PermissionError} when bubblewrap cannot be looked up.
 */
export function* hostFactsSteps(
  request: SandboxRequest,
  options: HostFactsOptions,
): Steps<HostFacts> {
  const { adapter, input } = options;
  if (!needsHostFacts(request)) {
    return {
      platform: process.platform,
      bwrap: undefined,
      confineStep: undefined,
    };
  }
  const found = linuxTool(
    "bwrap",
    adapter,
    lookupDenied(input.label, 'bubblewrap ("bwrap")', "sandbox"),
  );
  yield;
  const native = process.platform === "linux" &&
      adapter.env(RUNTIME_CONFINE_STEP_ENV) !== "1"
    ? nativeConfineElf(process.arch)
    : undefined;
  yield;
  let bwrap: BwrapFact = undefined;
  if (found !== undefined) {
    const usability = yield* bwrapFactSteps(
      found,
      options.cachedOnly === true,
      native,
    );
    bwrap = usability.usable ? { path: found } : { unusable: usability.reason };
  }
  // The native step's probe inside bubblewrap: its answer, when it ran.
  const nativeProbe = found === undefined || native === undefined
    ? undefined
    : nativeProbes.get(found);
  const nativeSupport = nativeProbe?.error === undefined
    ? nativeProbe
    : undefined;
  if (process.platform !== "linux") {
    return { platform: process.platform, bwrap, confineStep: undefined };
  }
  const runner: ConfineRunner | { none: string } =
    isCompiled() || options.binary === undefined
      ? { none: SAYS.compiledNoStepRuntime() }
      : options.runtime === undefined
      ? {
        runtime: adapter.name,
        binary: runtimeBinary(adapter.name, adapter, input),
      }
      : { runtime: options.runtime, binary: options.binary };
  yield;
  const parentEnv = adapter.environment();
  const confineStep = yield* confineStepFactSteps(
    runner,
    parentEnv,
    denoCacheMounts(parentEnv)?.denoDir,
    options.cachedOnly === true,
    nativeSupport,
  );
  return {
    platform: process.platform,
    ...(input.permissions.metadata === "strict" ? { root: runsAsRoot() } : {}),
    bwrap,
    // Where its probe failed (a /dev that cannot execute, say), the
    // runtime step confines alike.
    nativeStep: native !== undefined &&
      (nativeProbe === undefined || nativeSupport !== undefined),
    confineStep,
  };
}

/**
 * Makes, without blocking the event loop, the probes that the command
 * build of this worker would otherwise make synchronously on the first
 * start of the process (bubblewrap's and the confine step's: each a
 * process, the step's a whole runtime start). It
 * walks {@linkcode hostFacts} itself in slices, with cached answers only, and runs each
 * missing probe asynchronously, so it probes exactly what the build will
 * ask for. It decides nothing: the build then reads the cached answers
 * (and makes any probe still missing itself). Errors are left to the build,
 * which reports them.
 *
 * @param input The worker's resolved options.
 * @param adapter The parent's runtime.
 * @returns When the probes are cached.
 */
export async function prefetchHostFacts(
  input: WorkerCommandInput,
  adapter: RuntimeAdapter,
): Promise<void> {
  const request: SandboxRequest = {
    module: input.label,
    runtime: input.command ? "command" : input.runtime,
    sandbox: input.sandbox,
    permissions: input.permissions,
    local: input.launcher === undefined,
    compiledDeno: false,
  };
  if (!needsHostFacts(request)) return;
  // The step's own paths are refused under a write grant of any worker of
  // this process, this one's included: record its grants first, as the
  // build does, so a prefetch never runs a step the build would refuse.
  const write = input.permissions.write;
  if (write !== true) recordWorkerWritable(write);
  for (let probes = 0; probes < 4; probes++) {
    try {
      // In slices: the first walk pays the lookups, the probe cache's
      // stats and reads, and much code's first run (issue 23 item 4).
      await runStepsYielding(hostFactsSteps(request, {
        adapter,
        input,
        binary: input.command
          ? adapter.execPath()
          : runtimeBinary(input.runtime, adapter, input),
        runtime: input.command ? undefined : input.runtime,
        cachedOnly: true,
      }));
      return;
    } catch (error: unknown) {
      if (!(error instanceof ProbeNeeded)) return;
      // What a first spawn through `node:child_process` loads, each in a
      // turn of its own rather than inside the spawn (issue 23 item 4).
      await loadSpawnBuiltins();
      await error.run();
    }
  }
}

/**
 * Whether this process (and so its workers) runs as root: its effective
 * uid is 0, or it cannot be told (then as root: a check that cannot be made
 * refuses, never passes).
 */
function runsAsRoot(): boolean {
  try {
    const uid = process.effectiveUid();
    return uid === undefined || uid === 0;
  } catch {
    return true;
  }
}
