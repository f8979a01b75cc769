/**
 * The host facts the sandbox decides on, gathered in this one place: the
 * platform, whether bubblewrap is installed and can run here (not only
 * installed: user namespaces may be forbidden by Docker's default seccomp
 * profile, Ubuntu's AppArmor restriction or
 * `kernel.unprivileged_userns_clone=0`), and whether the confine step can
 * run and what the kernel offers it (Landlock ABI, seccomp). Each probe
 * runs once per process and binary; `plan.ts` decides from the facts.
 *
 * @module
 */

import { process, realpathSync, spawnSync } from "../node_builtins.ts";
import { writableByWorker } from "../launch/executable.ts";
import { linuxTool, lookupDenied, runtimeBinary } from "../launch/lookups.ts";
import type { WorkerCommandInput } from "../launch/types.ts";
import type { RuntimeAdapter, RuntimeName } from "../types.ts";
import { isCompiled } from "../self_exec.ts";
import { bwrapProbeArgv } from "./bwrap.ts";
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

/** What {@linkcode bwrapUsable} found. */
export type BwrapUsability =
  | { readonly usable: true }
  | { readonly usable: false; readonly reason: string };

const bwrapProbes = new Map<string, BwrapUsability>();

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
  const cached = bwrapProbes.get(bwrap);
  if (cached) return cached;
  const argv = bwrapProbeArgv(bwrap, bwrap);
  let found: BwrapUsability;
  try {
    const result = spawnSync(argv[0] as string, argv.slice(1), {
      env: {},
      encoding: "utf8",
      stdio: ["ignore", "ignore", "pipe"],
      timeout: 30_000,
    });
    if (result.status === 0) found = { usable: true };
    else {
      const said = String(result.stderr ?? "").trim().split("\n").at(-1);
      found = {
        usable: false,
        reason: result.error?.message ?? (said ||
          `it exited with code ${result.status}, signal ${result.signal}`),
      };
    }
  } catch (error: unknown) {
    found = {
      usable: false,
      reason: error instanceof Error ? error.message : String(error),
    };
  }
  bwrapProbes.set(bwrap, found);
  return found;
}

const stepProbes = new Map<string, ConfineSupport>();

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
  const argv = confineStepArgv(runner, "--probe");
  let support: ConfineSupport;
  try {
    const result = spawnSync(argv[0] as string, argv.slice(1), {
      cwd: "/",
      env: { ...env },
      encoding: "utf8",
      stdio: ["ignore", "pipe", "pipe"],
      timeout: 30_000,
    });
    const parsed = result.status === 0
      ? JSON.parse(String(result.stdout).trim()) as Partial<ConfineSupport>
      : undefined;
    if (
      parsed && Number.isInteger(parsed.landlockAbi) &&
      typeof parsed.seccomp === "boolean"
    ) {
      support = {
        landlockAbi: parsed.landlockAbi as number,
        seccomp: parsed.seccomp,
      };
    } else {
      const why = result.error?.message ??
        (String(result.stderr ?? "").trim().split("\n").at(-1) ||
          `exit code ${result.status}, signal ${result.signal}`);
      support = {
        landlockAbi: 0,
        seccomp: false,
        error: SAYS.stepProbeFailed(why),
      };
    }
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
 * confinement), and its probe must succeed.
 *
 * @param runner The runtime to run the step, or why there is none.
 * @param parentEnv The parent's environment.
 * @param parentDenoDir The parent's Deno cache directory, when known.
 * @returns The fact.
 */
export function confineStepFact(
  runner: ConfineRunner | { none: string },
  parentEnv: Readonly<Record<string, string>>,
  parentDenoDir: string | undefined,
): ConfineStepFact {
  if ("none" in runner) return { unavailable: runner.none, refused: false };
  if (seccompArch(process.arch) === undefined) {
    return { unavailable: SAYS.noSyscallTable(), refused: false };
  }
  const stepEnv = stepEnvironment(runner, parentDenoDir);
  if ("error" in stepEnv) return { unavailable: stepEnv.error, refused: false };
  // The step runs before any confinement: code a worker could have changed
  // (its own or another's write grant) must never run there.
  for (const path of stepReadOnly(runner, stepEnv)) {
    const grant = writableByWorker(realPath(path));
    if (grant !== undefined) {
      return {
        unavailable: SAYS.stepUnderWriteGrant(path, grant),
        refused: true,
      };
    }
  }
  const support = probeConfineSupport(runner, {
    PATH: parentEnv.PATH ?? "/usr/bin:/bin",
    ...stepEnv,
  });
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
  let bwrap: BwrapFact = undefined;
  if (found !== undefined) {
    const usability = bwrapUsable(found);
    bwrap = usability.usable ? { path: found } : { unusable: usability.reason };
  }
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
  const parentEnv = adapter.environment();
  return {
    platform: process.platform,
    bwrap,
    confineStep: confineStepFact(
      runner,
      parentEnv,
      denoCacheMounts(parentEnv)?.denoDir,
    ),
  };
}
