/**
 * The limits of one started worker, as its command carries them: which
 * mechanism holds each (for `stats()`), which limit ended it (from its exit
 * status and its cgroup), the memory its tree uses, and the release of its
 * group when it is gone.
 *
 * @module
 */

import type { LimitBreach } from "../../../errors.ts";
import type { ExitStatus } from "../../types.ts";
import type { WorkerCgroup } from "./cgroup.ts";
import type { LimitsPlan, RlimitSettings } from "./decide.ts";
import type { LimitMechanisms } from "./types.ts";

/** The limits of one worker. */
export interface WorkerLimits {
  /** Which mechanism holds each limit. */
  readonly mechanisms: LimitMechanisms;
  /**
   * The limit at which the kernel ended the worker, if one did.
   *
   * @param status How the worker exited (through its wrappers' mappers).
   */
  breach(status: ExitStatus): LimitBreach | undefined;
  /** Memory the worker's tree uses now (its cgroup's figure), when it has a memory group. */
  memoryBytes(): number | undefined;
  /** Ends what is left of the tree and removes its group (idempotent). */
  release(): void;
}

/**
 * The limit an exit status and a group's counters point to: an
 * out-of-memory kill in the group (memory), `SIGXCPU` under a CPU rlimit,
 * `SIGXFSZ` under a file size rlimit, or a failed exit after the group
 * refused a fork or thread (processes: Deno exits 1, "unable to create
 * worker threads", when it cannot start a thread it needs).
 *
 * @param status How the worker exited.
 * @param counters Kills by the out-of-memory killer in its group, and
 *   forks and threads its group refused.
 * @param rlimits Its rlimits.
 * @returns The limit, or `undefined`.
 *
 * @example
 * ```ts
 * import { breachOf } from "./worker_limits.ts";
 * import assert from "node:assert/strict";
 *
 * const rlimits = { cpuSeconds: 1, fileSizeBytes: undefined, openFiles: undefined };
 * const none = { oomKills: 0, processesRefused: 0 };
 * const oom = { ...none, oomKills: 1 };
 * const refused = { ...none, processesRefused: 3 };
 * assert.equal(breachOf({ code: null, signal: "SIGKILL" }, oom, rlimits), "memoryBytes");
 * assert.equal(breachOf({ code: null, signal: "SIGXCPU" }, none, rlimits), "cpuSeconds");
 * assert.equal(breachOf({ code: null, signal: "SIGXFSZ" }, none, rlimits), undefined);
 * assert.equal(breachOf({ code: 1, signal: null }, none, rlimits), undefined);
 * assert.equal(breachOf({ code: 1, signal: null }, refused, rlimits), "processes");
 * assert.equal(breachOf({ code: 0, signal: null }, refused, rlimits), undefined);
 * ```
 */
export function breachOf(
  status: ExitStatus,
  counters: { oomKills: number; processesRefused: number },
  rlimits: RlimitSettings,
): LimitBreach | undefined {
  if (counters.oomKills > 0) return "memoryBytes";
  if (status.signal === "SIGXCPU" && rlimits.cpuSeconds !== undefined) {
    return "cpuSeconds";
  }
  if (status.signal === "SIGXFSZ" && rlimits.fileSizeBytes !== undefined) {
    return "fileSizeBytes";
  }
  if (counters.processesRefused > 0 && status.code !== 0) return "processes";
  return undefined;
}

/**
 * The limits of a worker started with a plan and (when it has one) a group.
 *
 * @param plan The decision for this worker.
 * @param group Its cgroup, made for it.
 * @returns Its limits.
 */
export function workerLimits(
  plan: LimitsPlan,
  group: WorkerCgroup | undefined,
): WorkerLimits {
  return {
    mechanisms: plan.mechanisms,
    breach: (status) =>
      breachOf(status, {
        oomKills: group?.oomKills() ?? 0,
        processesRefused: group?.processesRefused() ?? 0,
      }, plan.rlimits),
    memoryBytes: () => group?.memoryBytes(),
    release: () => {
      if (group !== undefined) releaseGroup(group, RELEASE_TRIES);
    },
  };
}

/** How many times a group is removed again, 100 ms apart, while its last processes exit. */
const RELEASE_TRIES = 50;

/**
 * Removes a group, again later while processes of the tree are still
 * exiting (the kernel refuses to remove a group before they are gone);
 * what is still there at the end is left to the stale-group cleanup.
 */
function releaseGroup(group: WorkerCgroup, tries: number): void {
  if (group.remove() || tries <= 1) return;
  const timer = setTimeout(() => releaseGroup(group, tries - 1), 100);
  (timer as { unref?: () => void }).unref?.();
}
