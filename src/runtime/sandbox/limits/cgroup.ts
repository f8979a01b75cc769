/**
 * The contract of the two cgroup backends (v1 in `cgroup_v1.ts`, v2 in
 * `cgroup_v2.ts`): a group per worker, created with its limits under a group
 * of the parent's, joined by the worker before it runs any code, read for
 * breaches when it exits, then removed.
 *
 * @module
 */

import type { CgroupFs } from "./cgroup_fs.ts";

/** The cgroup limits of one worker. */
export interface CgroupLimits {
  /** `memory.max` / `memory.limit_in_bytes`, in bytes (`undefined`: none). */
  memoryBytes: number | undefined;
  /** `pids.max` (`undefined`: none). */
  processes: number | undefined;
}

/** The group of one worker. */
export interface WorkerCgroup {
  /**
   * The files the worker's first process writes `0` to (one per hierarchy)
   * before it runs anything else, so its whole tree is in: each group's
   * `tasks` on cgroup v1 (the step is single-threaded: moving its thread
   * moves it), its `cgroup.procs` on v2.
   */
  readonly join: readonly string[];
  /** Processes of the group the kernel's out-of-memory killer ended so far. */
  oomKills(): number;
  /** Forks and threads the group refused so far at its `pids.max`. */
  processesRefused(): number;
  /** Memory the group's tree uses now, in bytes, when readable. */
  memoryBytes(): number | undefined;
  /**
   * Ends what is left in the group (a process that outlived the worker)
   * and removes it. Idempotent; returns whether the group is gone (when
   * not, stale-group cleanup removes it later).
   */
  remove(): boolean;
}

/** A cgroup backend: which controllers it holds and how to make a group. */
export interface CgroupBackend {
  /** `1` or `2`. */
  readonly version: 1 | 2;
  /** Whether it can hold `memoryBytes`. */
  readonly memory: boolean;
  /** Whether it can hold `processes`. */
  readonly pids: boolean;
  /**
   * Creates the group of a worker with its limits.
   *
   * @throws {Error} naming the file when the kernel refuses.
   */
  create(limits: CgroupLimits): WorkerCgroup;
  /**
   * Removes this parent's own groups, as it exits (what still holds a
   * process stays, for the stale-group cleanup of a later parent).
   */
  close(): void;
}

/** What a backend needs besides its directories. */
export interface CgroupContext {
  /** The file system. */
  fs: CgroupFs;
  /** This process's pid. */
  pid: number;
  /** Ends a process (SIGKILL); throws when it is gone. */
  kill(pid: number): void;
  /** Whether a parent of the given pid and start time still runs. */
  alive(pid: number, start: string): boolean;
  /** This process's start time (field 22 of `/proc/self/stat`), which names its groups. */
  start: string;
}

/** How many rounds of SIGKILL {@linkcode killAll} sends to a group's remaining processes. */
const KILL_ROUNDS = 8;

/**
 * Sends SIGKILL to every process listed in a `cgroup.procs` file, a few
 * rounds (a fork between the read and the kill adds one more to end).
 *
 * @param context The file system and `kill`.
 * @param procs The group's `cgroup.procs`.
 */
export function killAll(context: CgroupContext, procs: string): void {
  for (let round = 0; round < KILL_ROUNDS; round++) {
    let pids: number[];
    try {
      pids = context.fs.read(procs).split("\n").filter((line) => line !== "")
        .map(Number);
    } catch {
      return;
    }
    if (pids.length === 0) return;
    for (const pid of pids) {
      try {
        context.kill(pid);
      } catch {
        // Gone already.
      }
    }
  }
}

/**
 * Reads one `key value` line of a flat-keyed control file
 * (`memory.events`, `memory.oom_control`).
 *
 * @param text The file's text.
 * @param key The key.
 * @returns Its value, or 0 when absent.
 *
 * @example
 * ```ts
 * import { keyedValue } from "./cgroup.ts";
 * import assert from "node:assert/strict";
 *
 * assert.equal(keyedValue("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n", "oom_kill"), 2);
 * assert.equal(keyedValue("low 0\n", "oom_kill"), 0);
 * ```
 */
export function keyedValue(text: string, key: string): number {
  const match = new RegExp(`^${key} (\\d+)$`, "m").exec(text);
  return match?.[1] === undefined ? 0 : Number(match[1]);
}

/** The name of this parent's group, `airlock-<pid>-<start time>`. */
export function parentGroupName(context: CgroupContext): string {
  return `airlock-${context.pid}-${context.start}`;
}

/** The pid and start time a parent group's name holds, if it is one. */
export function parseParentGroupName(
  name: string,
): { pid: number; start: string } | undefined {
  const match = /^airlock-(\d+)-(\d+)$/.exec(name);
  if (match?.[1] === undefined || match[2] === undefined) return undefined;
  return { pid: Number(match[1]), start: match[2] };
}
