/**
 * The cgroup v2 backend: the unified hierarchy, where the parent may write
 * a delegated subtree (systemd's `Delegate=yes`, or a container with a
 * writable cgroup namespace). v2 lets a group either hold processes or give
 * its children controllers, so the parent first moves itself into a leaf of
 * its own group (`airlock-<pid>-<start>`), then enables `memory` and `pids`
 * for the children and makes one group per worker beside that leaf
 * (`airlock-<pid>-<start>-w<n>`). Refused when other processes share the
 * parent's group: moving them is not airlock's to do.
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
  type WorkerCgroup,
} from "./cgroup.ts";
import { type CgroupFs, failure } from "./cgroup_fs.ts";

/** A group of a parent that is gone (its leaf or a worker's), by name. */
function staleOwner(
  name: string,
): { pid: number; start: string } | undefined {
  const match = /^airlock-(\d+)-(\d+)(?:-w\d+)?$/.exec(name);
  if (match?.[1] === undefined || match[2] === undefined) return undefined;
  return { pid: Number(match[1]), start: match[2] };
}

/**
 * Opens the v2 backend in this process's own group: moves the process into
 * a leaf and enables the controllers it finds for the children.
 *
 * @param dir This process's group in the unified hierarchy.
 * @param context The file system and process facts.
 * @returns The backend.
 * @throws {Error} naming the cause (no controller delegated, another process
 *   in the group, a file the kernel refused) and the fix.
 */
export function cgroupV2(dir: string, context: CgroupContext): CgroupBackend {
  const fs = context.fs;
  const available = words(fs, `${dir}/cgroup.controllers`);
  const controllers = (["memory", "pids"] as const).filter((name) =>
    available.includes(name)
  );
  if (controllers.length === 0) {
    throw new Error(
      `the cgroup ${dir} has no memory or pids controller (cgroup.controllers: "${
        available.join(" ")
      }"); delegate them to the parent's cgroup (e.g. systemd-run --user --scope -p Delegate=yes)`,
    );
  }
  const leaf = `${dir}/${parentGroupName(context)}`;
  const enabled = words(fs, `${dir}/cgroup.subtree_control`);
  if (!controllers.every((name) => enabled.includes(name))) {
    enterLeaf(dir, leaf, controllers, context);
  }
  let count = 0;
  return {
    version: 2,
    // The parent's leaf holds the parent itself until it is gone; worker
    // groups go as their workers do.
    close() {},
    memory: controllers.includes("memory"),
    pids: controllers.includes("pids"),
    create(limits: CgroupLimits): WorkerCgroup {
      let group = `${leaf}-w${++count}`;
      for (let tries = 1;; tries++) {
        try {
          fs.mkdir(group);
          break;
        } catch (error: unknown) {
          // Another copy of airlock in this process numbers its groups too.
          if (
            (error as { code?: unknown }).code === "EEXIST" && tries < 1000
          ) {
            group = `${leaf}-w${++count}`;
            continue;
          }
          throw new Error(
            `cannot create the group ${group} (${failure(error)})`,
            { cause: error },
          );
        }
      }
      return workerGroup(context, group, controllers, limits);
    },
  };
}

function readFile(fs: CgroupFs, file: string): string {
  try {
    return fs.read(file);
  } catch (error: unknown) {
    throw new Error(`cannot read ${file} (${failure(error)})`, {
      cause: error,
    });
  }
}

function words(fs: CgroupFs, file: string): string[] {
  return readFile(fs, file).trim().split(/\s+/);
}

function writeFile(fs: CgroupFs, file: string, value: string): void {
  try {
    fs.write(file, value);
  } catch (error: unknown) {
    throw new Error(
      `cannot write "${value}" to ${file} (${
        failure(error)
      }); delegate the parent's cgroup to it (e.g. systemd-run --user --scope -p Delegate=yes)`,
      { cause: error },
    );
  }
}

/**
 * Moves this process into its leaf and gives the children of `dir` the
 * controllers (after removing the groups of parents that are gone).
 *
 * @throws {Error} when other processes share `dir`, or the kernel refuses.
 */
function enterLeaf(
  dir: string,
  leaf: string,
  controllers: readonly ("memory" | "pids")[],
  context: CgroupContext,
): void {
  const fs = context.fs;
  const procs = readFile(fs, `${dir}/cgroup.procs`).split("\n");
  const others = procs.filter((line) =>
    line !== "" && Number(line) !== context.pid
  );
  if (others.length > 0) {
    throw new Error(
      `the parent's cgroup ${dir} holds other processes (pids ${
        others.slice(0, 5).join(", ")
      }), and cgroup v2 gives controllers only to groups without processes; run the parent in a cgroup of its own (e.g. systemd-run --user --scope -p Delegate=yes)`,
    );
  }
  for (const name of fs.list(dir)) {
    const owner = staleOwner(name);
    if (owner === undefined || owner.pid === context.pid) continue;
    if (context.alive(owner.pid, owner.start)) continue;
    try {
      fs.rmdir(`${dir}/${name}`);
    } catch {
      // Still holds a process: left for a later cleanup.
    }
  }
  try {
    fs.mkdir(leaf);
  } catch (error: unknown) {
    if ((error as { code?: unknown }).code !== "EEXIST") {
      throw new Error(
        `cannot create the group ${leaf} (${
          failure(error)
        }); delegate the parent's cgroup to it (e.g. systemd-run --user --scope -p Delegate=yes)`,
        { cause: error },
      );
    }
  }
  writeFile(fs, `${leaf}/cgroup.procs`, String(context.pid));
  writeFile(
    fs,
    `${dir}/cgroup.subtree_control`,
    controllers.map((name) => `+${name}`).join(" "),
  );
}

/** Sets a new worker group's limits (removing it if the kernel refuses) and returns it. */
function workerGroup(
  context: CgroupContext,
  group: string,
  controllers: readonly ("memory" | "pids")[],
  limits: CgroupLimits,
): WorkerCgroup {
  const fs = context.fs;
  const remove = (): boolean => {
    try {
      fs.write(`${group}/cgroup.kill`, "1");
    } catch {
      // Before Linux 5.14: one process at a time.
      killAll(context, `${group}/cgroup.procs`);
    }
    try {
      fs.rmdir(group);
      return true;
    } catch {
      return false;
    }
  };
  try {
    if (limits.memoryBytes !== undefined && controllers.includes("memory")) {
      writeFile(fs, `${group}/memory.max`, String(limits.memoryBytes));
      if (fs.list(group).includes("memory.swap.max")) {
        writeFile(fs, `${group}/memory.swap.max`, "0");
      }
    }
    if (limits.processes !== undefined && controllers.includes("pids")) {
      writeFile(fs, `${group}/pids.max`, String(limits.processes));
    }
  } catch (error: unknown) {
    remove();
    throw error;
  }
  let removed = false;
  return {
    join: [`${group}/cgroup.procs`],
    oomKills: () => {
      try {
        return keyedValue(fs.read(`${group}/memory.events`), "oom_kill");
      } catch {
        return 0;
      }
    },
    processesRefused: () => {
      try {
        return keyedValue(fs.read(`${group}/pids.events`), "max");
      } catch {
        return 0;
      }
    },
    memoryBytes: () => {
      try {
        return Number(fs.read(`${group}/memory.current`));
      } catch {
        return undefined;
      }
    },
    remove: () => removed ||= remove(),
  };
}
