/**
 * The Landlock backend as one layer of a launch: a wrapper that runs the
 * inner command through the confine step, with a Landlock ruleset built from
 * the worker's permissions and the seccomp filter. Inside bubblewrap when
 * both are used (bubblewrap mounts, and a Landlock domain forbids mounting).
 * Plus the check of whether Landlock can confine a worker here at all.
 *
 * @module
 */

import {
  dirname,
  fileURLToPath,
  join,
  process,
  realpathSync,
} from "../node_builtins.ts";
import { writableByWorker } from "../launch/executable.ts";
import type { ResolvedPermissions } from "../permissions.ts";
import type {
  LaunchStep,
  SandboxMode,
  WrappedStep,
  Wrapper,
} from "../launch/types.ts";
import {
  confinedArgv,
  confineEntryUrl,
  type ConfineRunner,
  confineSpec,
  type ConfineSupport,
  probeConfineSupport,
} from "./confine_command.ts";
import { landlockGaps } from "./landlock.ts";
import { CONFINE_HELD_ENV_PREFIX } from "./spec.ts";
import { seccompArch } from "./seccomp.ts";

/** Options of {@linkcode landlockWrapper}. */
export interface LandlockWrapperOptions {
  /** The runtime that runs the confine step. */
  runner: ConfineRunner;
  /** What the kernel offers (from {@linkcode landlockAvailability}). */
  support: ConfineSupport;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** The worker's working directory. */
  cwd: string;
  /**
   * Programs and installations the worker runs from, readable and
   * executable: the runtime binary, or a command's program and its prefix.
   */
  executables: readonly string[];
  /**
   * Variables the step itself runs with, restored to the worker's own
   * values (or removed) before the worker starts: see
   * {@linkcode stepEnvironment}.
   */
  stepEnv: Readonly<Record<string, string>>;
}

/**
 * The variables the confine step runs with on `runner`: for Deno, a cache
 * directory of its own under the parent's (`<DENO_DIR>/airlock-confine`:
 * the step's compiled code never comes from a cache a worker could write)
 * and no update check; for Bun, no transpiler cache.
 *
 * @param runner The runtime that runs the step.
 * @param parentDenoDir The parent's Deno cache directory, when known.
 * @returns The variables, or an error detail when the step cannot run.
 */
export function stepEnvironment(
  runner: ConfineRunner,
  parentDenoDir: string | undefined,
): Record<string, string> | { error: string } {
  if (runner.runtime === "bun") {
    return { BUN_RUNTIME_TRANSPILER_CACHE_PATH: "0" };
  }
  if (parentDenoDir === undefined) {
    return {
      error:
        "the confine step runs on Deno, which needs a cache directory, and the parent has none (set DENO_DIR or HOME)",
    };
  }
  return {
    DENO_DIR: join(parentDenoDir, "airlock-confine"),
    DENO_NO_UPDATE_CHECK: "1",
  };
}

/**
 * The paths the confine step must read to run (its runtime binary, its
 * code, its cache): what bubblewrap mounts when the step runs inside it.
 *
 * @param runner The runtime that runs the step.
 * @param stepEnv The step's own variables.
 * @returns Absolute paths.
 */
export function stepReadOnly(
  runner: ConfineRunner,
  stepEnv: Readonly<Record<string, string>>,
): string[] {
  const paths = [runner.binary];
  const entry = confineEntryUrl();
  if (entry.protocol === "file:") {
    const workers = dirname(fileURLToPath(entry));
    paths.push(workers, join(dirname(workers), "src", "runtime", "confine"));
  }
  if (stepEnv.DENO_DIR !== undefined) paths.push(stepEnv.DENO_DIR);
  return paths;
}

/**
 * The Landlock wrapper: the inner command runs through the confine step,
 * which applies the ruleset (the inner step's `readOnly` paths readable
 * besides the grants) and the seccomp filter, then execs it. The step execs,
 * so the worker keeps the step's pid and exit status.
 *
 * @param options The runner, kernel support, permissions and paths.
 * @returns The wrapper.
 */
export function landlockWrapper(options: LandlockWrapperOptions): Wrapper {
  return {
    // Without Landlock (ABI 0) the step installs the seccomp filter alone.
    name: options.support.landlockAbi > 0 ? "landlock" : "seccomp",
    wrap(inner: LaunchStep): WrappedStep {
      // The step sees none of the worker's variables under their names
      // (a preload in BUN_OPTIONS or LD_PRELOAD would run before
      // confinement); it gives them back at exec. Its own variables go.
      const env: Record<string, string> = {};
      for (const [name, value] of Object.entries(inner.env)) {
        env[`${CONFINE_HELD_ENV_PREFIX}${name}`] = value;
      }
      const changes: Record<string, string | null> = {};
      for (const name of Object.keys(options.stepEnv)) changes[name] = null;
      const spec = confineSpec({
        landlockAbi: options.support.landlockAbi,
        seccomp: options.support.seccomp,
        permissions: options.permissions,
        executables: options.executables,
        readOnly: inner.readOnly,
        listOnly: inner.listOnly ?? [],
        cwd: options.cwd,
        argv: inner.argv,
        env: changes,
      });
      return {
        argv: confinedArgv(options.runner, spec),
        env: { ...env, ...options.stepEnv },
        readOnly: [
          ...stepReadOnly(options.runner, options.stepEnv),
          ...inner.readOnly,
        ],
      };
    },
  };
}

function realPath(path: string): string {
  try {
    return realpathSync(path);
  } catch {
    return path;
  }
}

/** Whether Landlock can confine a worker here, and alone. */
export interface LandlockAvailability {
  /** What the kernel offers, when the step could run. */
  support: ConfineSupport | undefined;
  /** The step's own variables, when it can run. */
  stepEnv: Record<string, string> | undefined;
  /** Whether Landlock and seccomp can be applied at all (as a second backend, at least). */
  usable: boolean;
  /**
   * Whether the step can install the seccomp filter though the kernel has no
   * Landlock: worth running inside bubblewrap for the filter alone.
   */
  seccompOnly: boolean;
  /** Whether Landlock alone enforces every grant (no ABI gap). */
  alone: boolean;
  /** Why it is not usable, or not alone, in words; `""` when it is both. */
  reason: string;
  /**
   * Whether Landlock was refused for safety or failed a check (the confine
   * step's code, runtime or cache lies under a worker's write grant; its
   * probe failed), as opposed to missing from this machine (no kernel
   * support, no runtime to run the step). A refused backend is never
   * silently dropped: without bubblewrap the worker does not start.
   */
  refused: boolean;
}

/**
 * Whether Landlock can confine a worker with these permissions here: the
 * confine step must run (a runtime to run it, Linux, an architecture the
 * seccomp filter knows), the kernel must have Landlock and seccomp, and, to
 * confine alone, its ABI must have every feature the grants need (see
 * `landlockGaps`).
 *
 * @param runner The runtime to run the step, or `undefined` with why there is none.
 * @param permissions The worker's resolved permissions.
 * @param parentEnv The parent's environment.
 * @param parentDenoDir The parent's Deno cache directory, when known.
 * @returns The availability.
 */
export function landlockAvailability(
  runner: ConfineRunner | { none: string },
  permissions: ResolvedPermissions,
  parentEnv: Readonly<Record<string, string>>,
  parentDenoDir: string | undefined,
): LandlockAvailability {
  const unusable = (
    reason: string,
    refused = false,
  ): LandlockAvailability => ({
    support: undefined,
    stepEnv: undefined,
    usable: false,
    seccompOnly: false,
    alone: false,
    reason,
    refused,
  });
  if ("none" in runner) return unusable(runner.none);
  if (seccompArch(process.arch) === undefined) {
    return unusable(
      `the seccomp filter has no system call table for this architecture`,
    );
  }
  const stepEnv = stepEnvironment(runner, parentDenoDir);
  if ("error" in stepEnv) return unusable(stepEnv.error);
  // The step runs before any confinement: code a worker could have changed
  // (its own or another's write grant) must never run there.
  for (const path of stepReadOnly(runner, stepEnv)) {
    const grant = writableByWorker(realPath(path));
    if (grant !== undefined) {
      return unusable(
        `the confine step's ${JSON.stringify(path)} lies under ${
          JSON.stringify(grant)
        }, which a worker may write; keep write grants away from airlock, the runtime and its caches`,
        true,
      );
    }
  }
  const support = probeConfineSupport(runner, {
    PATH: parentEnv.PATH ?? "/usr/bin:/bin",
    ...stepEnv,
  });
  if (support.error !== undefined) return unusable(support.error, true);
  if (support.landlockAbi < 1) {
    return {
      ...unusable(
        "the kernel has no Landlock (Linux 5.13 or later with landlock in its lsm= list)",
      ),
      support,
      stepEnv,
      seccompOnly: support.seccomp,
    };
  }
  if (!support.seccomp) {
    return unusable("the kernel does not offer seccomp filters");
  }
  const gaps = landlockGaps(permissions, support.landlockAbi);
  return {
    support,
    stepEnv,
    usable: true,
    seccompOnly: false,
    refused: false,
    alone: gaps.length === 0,
    reason: gaps.length === 0
      ? ""
      : `the kernel's Landlock ABI ${support.landlockAbi} lacks ${
        gaps.map((gap) => `${gap.feature} (ABI ${gap.abi})`).join(" and ")
      }`,
  };
}

/** Options of {@linkcode landlockBestEffort}. */
export interface LandlockBestEffortOptions {
  /** Whether the sandbox decision used the sandbox. */
  used: boolean;
  /** The worker's runtime (`"command"` for a user's command). */
  runtime: "deno" | "bun" | "command";
  /** The `sandbox` option. */
  sandbox: SandboxMode;
  /** The worker's resolved permissions. */
  permissions: ResolvedPermissions;
  /** Whether bubblewrap is usable. */
  bwrap: boolean;
  /** Whether Landlock can be applied at all. */
  landlockUsable: boolean;
}

/**
 * Whether a worker the sandbox decision leaves unconfined gets Landlock
 * anyway: with `permissions.enforce: "best-effort"`, where bubblewrap cannot
 * run and Landlock cannot enforce every grant alone (an ABI gap), a Bun or
 * `command` worker is confined as far as Landlock goes rather than not at
 * all. Never with `sandbox: "none"` or permissions `"all"`; never for Deno,
 * whose flags the decision relies on.
 *
 * @param options The decision and what is available.
 * @returns Whether to apply Landlock.
 *
 * @example
 * ```ts
 * import { landlockBestEffort } from "./wrapper.ts";
 * import { resolvePermissions } from "../permissions.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(landlockBestEffort({
 *   used: false,
 *   runtime: "bun",
 *   sandbox: "auto",
 *   permissions: resolvePermissions({ enforce: "best-effort" }, "/"),
 *   bwrap: false,
 *   landlockUsable: true,
 * }), true);
 * ```
 */
export function landlockBestEffort(
  options: LandlockBestEffortOptions,
): boolean {
  return !options.used && options.landlockUsable && !options.bwrap &&
    options.runtime !== "deno" && options.sandbox !== "none" &&
    !options.permissions.all &&
    options.permissions.enforce === "best-effort";
}
