/**
 * The one decision of which mechanism holds each limit of a worker, from
 * the resolved `limits` and the host's facts: a cgroup for `memoryBytes`
 * and `processes`, an rlimit for `cpuSeconds`, `fileSizeBytes` and
 * `openFiles`, or nothing; under `enforce: "strict"`, a limit asked for that
 * nothing here can hold refuses the start. Pure: every refusal's text is in
 * {@linkcode LIMIT_REFUSALS}.
 *
 * @module
 */

import type { CgroupLimits } from "./cgroup.ts";
import {
  LIMIT_KEYS,
  type LimitKey,
  type LimitMechanism,
  type LimitMechanisms,
  type ResolvedLimits,
} from "./types.ts";

/** What the host offers a worker's limits. */
export interface LimitsFacts {
  /** The worker runs on this machine (no launcher). */
  local: boolean;
  /** The cgroup controllers this parent can give a worker, or why none. */
  cgroup: { memory: boolean; pids: boolean } | { error: string };
  /** The `prlimit` program that sets rlimits before the worker runs, or why none. */
  prlimit: string | { error: string };
}

/** The rlimits a worker starts under. */
export interface RlimitSettings {
  /** `RLIMIT_CPU` soft limit in seconds (the hard one is a second more). */
  cpuSeconds: number | undefined;
  /** `RLIMIT_FSIZE` in bytes. */
  fileSizeBytes: number | undefined;
  /** `RLIMIT_NOFILE`. */
  openFiles: number | undefined;
}

/** How a worker's limits are held. */
export interface LimitsPlan {
  /** Which mechanism holds each limit (`stats().limits`). */
  mechanisms: LimitMechanisms;
  /** The worker's cgroup and its limits, or `undefined` for none. */
  cgroup: CgroupLimits | undefined;
  /** The rlimits (all `undefined`: none). */
  rlimits: RlimitSettings;
}

/** A limit the host cannot hold under `enforce: "strict"`. */
export interface LimitsRefusal {
  /** The limit. */
  limit: LimitKey;
  /** What cannot be done, why, and the fix. */
  error: string;
}

/** The mechanism each limit needs. */
const NEEDS: Readonly<Record<LimitKey, "cgroup" | "rlimit">> = {
  memoryBytes: "cgroup",
  processes: "cgroup",
  cpuSeconds: "rlimit",
  fileSizeBytes: "rlimit",
  openFiles: "rlimit",
};

const BEST_EFFORT = 'or pass limits.enforce "best-effort" to start without it';

/** Every refusal's text, by cause. */
export const LIMIT_REFUSALS = {
  launcher: (limit: LimitKey): string =>
    `limits.${limit} cannot be enforced on a worker run through a launcher (it runs on the other side); set the limit there, ${BEST_EFFORT}`,
  cgroup: (limit: LimitKey, controller: string, detail: string): string =>
    `limits.${limit} needs a cgroup with the ${controller} controller, and none can be had here: ${detail}; ${BEST_EFFORT}`,
  rlimit: (limit: LimitKey, detail: string): string =>
    `limits.${limit} needs an rlimit set before the worker runs, and it cannot be set here: ${detail}; ${BEST_EFFORT}`,
} as const;

/**
 * Decides which mechanism holds each limit of a worker.
 *
 * @param limits The resolved `limits` option.
 * @param facts What the host offers.
 * @returns The plan, or the refusal of the first limit asked for that cannot
 *   be enforced under `enforce: "strict"`.
 *
 * @example
 * ```ts
 * import { decideLimits } from "./decide.ts";
 * import assert from "node:assert/strict";
 *
 * const limits = {
 *   memoryBytes: 2 ** 28, processes: 64, processesGiven: true,
 *   cpuSeconds: undefined, fileSizeBytes: undefined, openFiles: 64,
 *   enforce: "strict" as const,
 * };
 * const plan = decideLimits(limits, {
 *   local: true,
 *   cgroup: { memory: true, pids: true },
 *   prlimit: "/usr/bin/prlimit",
 * });
 * assert.ok(!("error" in plan));
 * assert.equal(plan.mechanisms.memoryBytes, "cgroup");
 * assert.equal(plan.mechanisms.openFiles, "rlimit");
 * assert.equal(plan.mechanisms.cpuSeconds, "none");
 * ```
 */
export function decideLimits(
  limits: ResolvedLimits,
  facts: LimitsFacts,
): LimitsPlan | LimitsRefusal {
  const mechanisms: Record<LimitKey, LimitMechanism> = {
    memoryBytes: "none",
    processes: "none",
    cpuSeconds: "none",
    fileSizeBytes: "none",
    openFiles: "none",
  };
  const strict = limits.enforce === "strict";
  for (const limit of LIMIT_KEYS) {
    const value = limits[limit];
    if (value === undefined) continue;
    // The default processes limit is held where it can be, never refused.
    const asked = limit !== "processes" || limits.processesGiven;
    const refuse = (error: string): LimitsRefusal | undefined =>
      strict && asked ? { limit, error } : undefined;
    if (!facts.local) {
      const refusal = refuse(LIMIT_REFUSALS.launcher(limit));
      if (refusal) return refusal;
      continue;
    }
    if (NEEDS[limit] === "cgroup") {
      const controller = limit === "memoryBytes" ? "memory" : "pids";
      const cgroup = facts.cgroup;
      const held = !("error" in cgroup) && cgroup[controller];
      if (held) {
        mechanisms[limit] = "cgroup";
        continue;
      }
      const refusal = refuse(LIMIT_REFUSALS.cgroup(
        limit,
        controller,
        "error" in cgroup
          ? cgroup.error
          : `the parent's cgroups have no ${controller} controller to give`,
      ));
      if (refusal) return refusal;
      continue;
    }
    if (typeof facts.prlimit === "string") {
      mechanisms[limit] = "rlimit";
      continue;
    }
    const refusal = refuse(LIMIT_REFUSALS.rlimit(limit, facts.prlimit.error));
    if (refusal) return refusal;
  }
  const cgroup = facts.local && !("error" in facts.cgroup)
    ? {
      memoryBytes: mechanisms.memoryBytes === "cgroup"
        ? limits.memoryBytes
        : undefined,
      processes: mechanisms.processes === "cgroup"
        ? limits.processes
        : undefined,
    }
    : undefined;
  const rlimit = (limit: "cpuSeconds" | "fileSizeBytes" | "openFiles") =>
    mechanisms[limit] === "rlimit" ? limits[limit] : undefined;
  return {
    mechanisms,
    cgroup,
    rlimits: {
      cpuSeconds: rlimit("cpuSeconds"),
      fileSizeBytes: rlimit("fileSizeBytes"),
      openFiles: rlimit("openFiles"),
    },
  };
}
