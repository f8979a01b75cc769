/**
 * A worker's limits at launch: gathers the host's facts (the cgroup
 * backend, `prlimit`, the shell), asks {@linkcode decideLimits}, refuses
 * with `PermissionError` under strict, makes the worker's group and the
 * limits step that puts the worker in it.
 *
 * @module
 */

import { PermissionError } from "../../../errors.ts";
import { isExecutableFile } from "../../launch/executable.ts";
import { linuxTool, lookupDenied } from "../../launch/lookups.ts";
import type { Wrapper } from "../../launch/types.ts";
import { process } from "../../node_builtins.ts";
import type { RuntimeAdapter } from "../../types.ts";
import type { WorkerCgroup } from "./cgroup.ts";
import { decideLimits, type LimitsFacts } from "./decide.ts";
import { cgroupBackend } from "./open_cgroups.ts";
import { NO_MECHANISMS, type ResolvedLimits } from "./types.ts";
import { limitsWrapper } from "./wrapper.ts";
import { type WorkerLimits, workerLimits } from "./worker_limits.ts";

/** The shell of the limits step. */
const SHELL = "/bin/sh";

/** What {@linkcode limitsLaunch} needs of the resolved options. */
export interface LimitsLaunchInput {
  /** The worker's display name, for errors. */
  label: string;
  /** The resolved `limits` option (`undefined`: none at all, a test's command). */
  limits?: ResolvedLimits | undefined;
  /** A launcher (`undefined`: none): the worker then runs elsewhere. */
  launcher: object | undefined;
}

/** A worker's limits step and its limits. */
export interface LimitsLaunch {
  /** The limits step, outside the sandbox; `undefined` for a worker run elsewhere. */
  wrapper: Wrapper | undefined;
  /** Its limits: mechanisms, breach, release of its group. */
  limits: WorkerLimits;
}

/**
 * Decides a worker's limits and makes its group.
 *
 * @param input The worker's limits and whether it runs here.
 * @param adapter The parent's runtime.
 * @returns The step and the limits; the caller releases `limits` if the
 *   worker is never spawned.
 * @throws {PermissionError} when a limit asked for cannot be enforced here
 *   under `enforce: "strict"` (`permission` is `limits.<key>`), or its group
 *   cannot be made.
 */
export function limitsLaunch(
  input: LimitsLaunchInput,
  adapter: RuntimeAdapter,
): LimitsLaunch {
  const limits = input.limits;
  if (limits === undefined) {
    return {
      wrapper: undefined,
      limits: workerLimits({
        mechanisms: NO_MECHANISMS,
        cgroup: undefined,
        rlimits: {
          cpuSeconds: undefined,
          fileSizeBytes: undefined,
          openFiles: undefined,
        },
      }, undefined),
    };
  }
  const local = input.launcher === undefined && process.platform === "linux";
  const shell = local &&
    isExecutableFile(
      SHELL,
      lookupDenied(
        input.label,
        `the shell of the limits step (${SHELL})`,
        "sandbox",
      ),
    );
  const missingShell = {
    error: process.platform === "linux"
      ? `the limits step runs ${SHELL}, which is missing`
      : `limits are held by Linux's cgroups and rlimits, and this is ${process.platform}`,
  };
  const asksRlimits = limits.cpuSeconds !== undefined ||
    limits.fileSizeBytes !== undefined || limits.openFiles !== undefined;
  const prlimit = shell && asksRlimits
    ? linuxTool(
      "prlimit",
      adapter,
      lookupDenied(input.label, "prlimit (util-linux)", "sandbox"),
    )
    : undefined;
  const backend = shell
    ? cgroupBackend(adapter.name, undefined, (close) => adapter.onExit(close))
    : missingShell;
  const facts: LimitsFacts = {
    local: input.launcher === undefined,
    cgroup: "error" in backend
      ? backend
      : { memory: backend.memory, pids: backend.pids },
    prlimit: !shell ? missingShell : prlimit ?? {
      error: process.platform === "linux"
        ? "prlimit is not on PATH; install util-linux"
        : `rlimits are set by prlimit, on Linux, and this is ${process.platform}`,
    },
  };
  const plan = decideLimits(limits, facts);
  if ("error" in plan) {
    throw new PermissionError(plan.error, {
      module: input.label,
      permission: `limits.${plan.limit}`,
    });
  }
  if (!shell) {
    return { wrapper: undefined, limits: workerLimits(plan, undefined) };
  }
  let group: WorkerCgroup | undefined;
  let held = plan;
  if (plan.cgroup !== undefined && !("error" in backend)) {
    try {
      group = backend.create(plan.cgroup);
    } catch (error: unknown) {
      const asked = limits.memoryBytes !== undefined || limits.processesGiven;
      if (limits.enforce === "strict" && asked) {
        throw new PermissionError(
          `cannot make the worker's cgroup: ${
            error instanceof Error ? error.message : String(error)
          }; or pass limits.enforce "best-effort" to start without it`,
          { module: input.label, permission: "limits", cause: error },
        );
      }
      // Not asked for, or best-effort: started without the group, and said.
      held = {
        ...plan,
        cgroup: undefined,
        mechanisms: {
          ...plan.mechanisms,
          memoryBytes: "none",
          processes: "none",
        },
      };
    }
  }
  return {
    wrapper: limitsWrapper({
      shell: SHELL,
      join: group?.join ?? [],
      rlimits: held.rlimits,
      prlimit,
    }),
    limits: workerLimits(held, group),
  };
}
