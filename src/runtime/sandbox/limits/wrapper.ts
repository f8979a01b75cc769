/**
 * The limits step: the outermost layer a local worker starts through,
 * before any sandbox. A POSIX shell raises its `oom_score_adj` (so the
 * kernel's out-of-memory killer picks a worker before the parent, always),
 * writes `0` to each of the worker's groups' join files (`WorkerCgroup.join`:
 * so the tree is in its groups before anything forks), and execs the rest: `prlimit` with the
 * worker's rlimits when it has any, then the sandbox and the worker. Every
 * step execs: the worker keeps the step's pid and exit status; each inherits
 * the score, the groups and the rlimits.
 *
 * @module
 */

import type { LaunchStep, Wrapper } from "../../launch/types.ts";
import type { RlimitSettings } from "./decide.ts";

/** The `oom_score_adj` of every worker: the most, picked first. */
export const WORKER_OOM_SCORE_ADJ = 1000;

/** The prefix of the lines the limits step writes to stderr when it fails. */
export const LIMITS_STDERR_PREFIX = "airlock limits:";

/** The exit code of a limits step that could not set a limit up. */
export const LIMITS_FAILED_EXIT_CODE = 126;

/**
 * The step's script: `$0` is the score, then the groups' join files up to
 * `--`, then the command. Errors of its redirections go to /dev/null; its
 * own lines name what failed.
 */
const SCRIPT =
  `{ echo "$0" > /proc/self/oom_score_adj; } 2>/dev/null || { echo "${LIMITS_STDERR_PREFIX} cannot raise oom_score_adj to $0" >&2; exit ${LIMITS_FAILED_EXIT_CODE}; }
while [ "$1" != -- ]; do { echo 0 > "$1"; } 2>/dev/null || { echo "${LIMITS_STDERR_PREFIX} cannot join the cgroup of $1" >&2; exit ${LIMITS_FAILED_EXIT_CODE}; }; shift; done
shift
exec "$@"`;

/**
 * The `prlimit` arguments of a worker's rlimits (`RLIMIT_CPU` soft at the
 * limit, hard a second later: `SIGXCPU`, then `SIGKILL`).
 *
 * @param rlimits The rlimits.
 * @returns The options, empty when there are none.
 *
 * @example
 * ```ts
 * import { prlimitArgs } from "./wrapper.ts";
 * import assert from "node:assert/strict";
 *
 * assert.deepEqual(
 *   prlimitArgs({ cpuSeconds: 2, fileSizeBytes: 1024, openFiles: undefined }),
 *   ["--cpu=2:3", "--fsize=1024:1024"],
 * );
 * ```
 */
export function prlimitArgs(rlimits: RlimitSettings): string[] {
  const args: string[] = [];
  if (rlimits.cpuSeconds !== undefined) {
    args.push(`--cpu=${rlimits.cpuSeconds}:${rlimits.cpuSeconds + 1}`);
  }
  if (rlimits.fileSizeBytes !== undefined) {
    args.push(`--fsize=${rlimits.fileSizeBytes}:${rlimits.fileSizeBytes}`);
  }
  if (rlimits.openFiles !== undefined) {
    args.push(`--nofile=${rlimits.openFiles}:${rlimits.openFiles}`);
  }
  return args;
}

/** Options of {@linkcode limitsWrapper}. */
export interface LimitsWrapperOptions {
  /** The POSIX shell (`/bin/sh`). */
  shell: string;
  /** The join files of the worker's groups (`WorkerCgroup.join`). */
  join: readonly string[];
  /** The rlimits. */
  rlimits: RlimitSettings;
  /** The `prlimit` program, needed when there are rlimits. */
  prlimit: string | undefined;
}

/**
 * The limits step as a wrapper.
 *
 * @param options The shell, the groups, the rlimits.
 * @returns The wrapper.
 * @throws {TypeError} when rlimits are given without `prlimit`.
 */
export function limitsWrapper(options: LimitsWrapperOptions): Wrapper {
  const limits = prlimitArgs(options.rlimits);
  if (limits.length > 0 && options.prlimit === undefined) {
    throw new TypeError("Cannot set rlimits: no prlimit");
  }
  return {
    name: "limits",
    wrap(inner: LaunchStep) {
      const rlimited = limits.length > 0 && options.prlimit !== undefined
        ? [options.prlimit, ...limits, "--", ...inner.argv]
        : inner.argv;
      return {
        argv: [
          options.shell,
          "-c",
          SCRIPT,
          String(WORKER_OOM_SCORE_ADJ),
          ...options.join,
          "--",
          ...rlimited,
        ],
        env: inner.env,
        readOnly: [
          options.shell,
          ...(options.prlimit === undefined ? [] : [options.prlimit]),
          ...inner.readOnly,
        ],
      };
    },
  };
}
