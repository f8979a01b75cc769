/**
 * The cgroup v1 backend: the `memory` and `pids` hierarchies, each mounted
 * on its own (what a hybrid host has). Under this process's own group in
 * each, a group of this parent (`airlock-<pid>-<start>`), and under it one
 * per worker (`w<n>`). Nested under the parent's own group, every limit the
 * parent is under still covers its workers.
 *
 * @module
 */

import {
  type CgroupBackend,
  type CgroupContext,
  type CgroupLimits,
  keyedValue,
  killAll,
  parentGroupName,
  parseParentGroupName,
  type WorkerCgroup,
} from "./cgroup.ts";
import { failure } from "./cgroup_fs.ts";

/** This process's own group in each v1 hierarchy. */
export interface CgroupV1Dirs {
  /** In the `memory` hierarchy. */
  memory?: string | undefined;
  /** In the `pids` hierarchy. */
  pids?: string | undefined;
}

/** How many names a worker's group tries before its creation fails. */
const MAX_NAME_TRIES = 1000;

/** A worker group's name was taken by another copy of airlock in this process. */
class NameTaken extends Error {}

/**
 * Removes the groups of parents that are gone (their workers' groups
 * first), beside this parent's: whatever they could not remove themselves.
 * A group that still holds a process stays.
 */
function removeStale(context: CgroupContext, dir: string): void {
  let names: string[];
  try {
    names = context.fs.list(dir);
  } catch {
    return;
  }
  for (const name of names) {
    const owner = parseParentGroupName(name);
    if (owner === undefined || owner.pid === context.pid) continue;
    if (context.alive(owner.pid, owner.start)) continue;
    const group = `${dir}/${name}`;
    try {
      for (const child of context.fs.list(group)) {
        if (/^w\d+$/.test(child)) {
          try {
            context.fs.rmdir(`${group}/${child}`);
          } catch {
            // Still holds a process.
          }
        }
      }
      context.fs.rmdir(group);
    } catch {
      // Still holds a group or a process: left for a later cleanup.
    }
  }
}

/**
 * Makes this parent's group in one hierarchy (after removing stale ones).
 *
 * @returns Its directory.
 * @throws {Error} naming the directory when it cannot be made.
 */
function parentGroup(context: CgroupContext, dir: string): string {
  // Off the first start's path (listing a cgroup directory is slow on
  // Deno): the stale groups of dead parents go once the loop is free.
  const timer = setTimeout(() => removeStale(context, dir), 0);
  (timer as { unref?: () => void }).unref?.();
  const group = `${dir}/${parentGroupName(context)}`;
  try {
    context.fs.mkdir(group);
  } catch (error: unknown) {
    if ((error as { code?: unknown }).code !== "EEXIST") {
      throw new Error(`cannot create the group ${group} (${failure(error)})`, {
        cause: error,
      });
    }
  }
  return group;
}

/**
 * Opens the v1 backend: makes this parent's group in each hierarchy given
 * (the check that groups can be made here at all).
 *
 * @param dirs This process's own group in each hierarchy.
 * @param context The file system and process facts.
 * @returns The backend.
 * @throws {Error} naming the group that cannot be made.
 */
export function cgroupV1(
  dirs: CgroupV1Dirs,
  context: CgroupContext,
): CgroupBackend {
  const memory = dirs.memory === undefined
    ? undefined
    : parentGroup(context, dirs.memory);
  const pids = dirs.pids === undefined
    ? undefined
    : parentGroup(context, dirs.pids);
  let count = 0;
  const fs = context.fs;
  // The worker groups this copy made and has not removed: another copy of
  // airlock in this process (a second isolate, a second install) shares the
  // parent's group, and its workers' groups are not this copy's to remove.
  const live = new Set<string[]>();
  return {
    version: 1,
    close() {
      for (const dirs of live) {
        for (const dir of dirs) {
          try {
            fs.rmdir(dir);
          } catch {
            // Still holds a process: a later parent removes it.
          }
        }
      }
      for (const group of [memory, pids]) {
        if (group === undefined) continue;
        try {
          fs.rmdir(group);
        } catch {
          // It still holds a group: a later parent, or the last copy, removes it.
        }
      }
    },
    memory: memory !== undefined,
    pids: pids !== undefined,
    create(limits: CgroupLimits): WorkerCgroup {
      for (let tries = 1;; tries++) {
        try {
          return createWorkerGroup(
            context,
            { memory, pids },
            `w${++count}`,
            limits,
            live,
          );
        } catch (error: unknown) {
          // Another copy of airlock in this process (a second isolate, a
          // second install) numbers its groups too: take the next name.
          if (!(error instanceof NameTaken) || tries >= MAX_NAME_TRIES) {
            throw error;
          }
        }
      }
    },
  };
}

/**
 * Makes a worker's group `name` under this parent's group in each
 * hierarchy, with its limits, and records it in `live` until removed.
 *
 * @throws {NameTaken} when another copy of airlock took the name.
 * @throws {Error} naming the file the kernel refused.
 */
function createWorkerGroup(
  context: CgroupContext,
  parents: { memory: string | undefined; pids: string | undefined },
  name: string,
  limits: CgroupLimits,
  live: Set<string[]>,
): WorkerCgroup {
  const { memory, pids } = parents;
  const fs = context.fs;
  const made: string[] = [];
  const write = (file: string, value: string): void => {
    try {
      fs.write(file, value);
    } catch (error: unknown) {
      throw new Error(
        `cannot write "${value}" to ${file} (${failure(error)})`,
        { cause: error },
      );
    }
  };
  const make = (parent: string): string => {
    const group = `${parent}/${name}`;
    try {
      fs.mkdir(group);
    } catch (error: unknown) {
      if ((error as { code?: unknown }).code === "EEXIST") {
        removeMade();
        throw new NameTaken();
      }
      throw new Error(
        `cannot create the group ${group} (${failure(error)})`,
        { cause: error },
      );
    }
    made.push(group);
    return group;
  };
  // One hierarchy can release a killed process before the other (pids
  // before memory, which holds it until it is reaped): a group removed by
  // an earlier call stays removed, so a later call can still succeed.
  const removeMade = (): boolean => {
    for (const group of [...made]) {
      killAll(context, `${group}/cgroup.procs`);
      try {
        fs.rmdir(group);
      } catch (error: unknown) {
        if ((error as { code?: unknown }).code !== "ENOENT") continue;
      }
      made.splice(made.indexOf(group), 1);
    }
    return made.length === 0;
  };
  let memoryGroup: string | undefined;
  let pidsGroup: string | undefined;
  try {
    if (memory !== undefined) {
      memoryGroup = make(memory);
      if (limits.memoryBytes !== undefined) {
        const value = String(limits.memoryBytes);
        write(`${memoryGroup}/memory.limit_in_bytes`, value);
        // With swap accounting, memory plus swap: swap cannot stretch it.
        if (fs.list(memoryGroup).includes("memory.memsw.limit_in_bytes")) {
          write(`${memoryGroup}/memory.memsw.limit_in_bytes`, value);
        }
      }
    }
    if (pids !== undefined && limits.processes !== undefined) {
      pidsGroup = make(pids);
      write(`${pidsGroup}/pids.max`, String(limits.processes));
    }
  } catch (error: unknown) {
    removeMade();
    throw error;
  }
  let removed = false;
  live.add(made);
  return {
    // `tasks`, not `cgroup.procs`: the step is a single-threaded shell that
    // moves itself, and the kernel moves the writing thread without taking
    // cgroup_threadgroup_rwsem for writing, whose first taking after a
    // quiet spell waits for an RCU grace period (most of the step's cost).
    join: made.map((group) => `${group}/tasks`),
    oomKills: () => {
      if (memoryGroup === undefined) return 0;
      try {
        return keyedValue(
          fs.read(`${memoryGroup}/memory.oom_control`),
          "oom_kill",
        );
      } catch {
        return 0;
      }
    },
    processesRefused: () => {
      if (pidsGroup === undefined) return 0;
      try {
        return keyedValue(fs.read(`${pidsGroup}/pids.events`), "max");
      } catch {
        return 0;
      }
    },
    memoryBytes: () => {
      if (memoryGroup === undefined) return undefined;
      try {
        return Number(fs.read(`${memoryGroup}/memory.usage_in_bytes`));
      } catch {
        return undefined;
      }
    },
    remove: () => {
      removed ||= removeMade();
      if (removed) live.delete(made);
      return removed;
    },
  };
}
