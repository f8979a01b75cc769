/**
 * The cgroup backend of this process, opened once on first use: v2 where
 * the parent's unified group has the memory or pids controller to give,
 * else v1 where those hierarchies are mounted and the parent may make
 * groups in them, else the reason neither can be had (with its fix).
 *
 * @module
 */

import { process } from "../../node_builtins.ts";
import type { RuntimeName } from "../../types.ts";
import type { CgroupBackend, CgroupContext } from "./cgroup.ts";
import { type CgroupFs, failure, REAL_CGROUP_FS } from "./cgroup_fs.ts";
import { type CgroupPlaces, readCgroupPlaces } from "./cgroup_host.ts";
import { cgroupV1 } from "./cgroup_v1.ts";
import { cgroupV2 } from "./cgroup_v2.ts";

/** A process's pid and start time (fields 1 and 22 of `/proc/<pid>/stat`). */
export function parseProcStat(
  text: string,
): { pid: number; start: string } | undefined {
  const close = text.lastIndexOf(")");
  if (close < 0) return undefined;
  const pid = Number(text.slice(0, text.indexOf(" ")));
  // Fields from the third on follow the command's closing parenthesis.
  const start = text.slice(close + 2).split(" ")[19];
  if (!Number.isInteger(pid) || start === undefined || !/^\d+$/.test(start)) {
    return undefined;
  }
  return { pid, start };
}

/**
 * Opens a backend from where this process's groups are.
 *
 * @param places The directories of its own groups.
 * @param context The file system and process facts.
 * @returns The backend, or why none can be had.
 */
export function openCgroupBackend(
  places: CgroupPlaces,
  context: CgroupContext,
): CgroupBackend | { error: string } {
  const problems: string[] = [];
  if (places.v2 !== undefined) {
    let controllers = "";
    try {
      controllers = context.fs.read(`${places.v2}/cgroup.controllers`);
    } catch {
      // No unified group to read: v1 below, or nothing.
    }
    if (/\b(memory|pids)\b/.test(controllers)) {
      try {
        return cgroupV2(places.v2, context);
      } catch (error: unknown) {
        problems.push(`cgroup v2: ${failure(error)}`);
      }
    }
  }
  if (places.v1.memory !== undefined || places.v1.pids !== undefined) {
    try {
      return cgroupV1(places.v1, context);
    } catch (error: unknown) {
      problems.push(`cgroup v1: ${failure(error)}`);
    }
  }
  if (problems.length === 0) {
    problems.push(
      "no cgroup hierarchy here has the memory or pids controller for the parent's cgroup",
    );
  }
  return { error: problems.join("; ") };
}

let opened: CgroupBackend | { error: string } | undefined;

/**
 * This process's cgroup backend, opened on first use (it makes the
 * parent's own groups and, on v2, moves the parent into a leaf).
 *
 * @param runtime The parent's runtime (Deno reaches `/proc` and
 *   `/sys/fs/cgroup` only with `--allow-all`).
 * @param fs The file system (tests pass a tree of their own).
 * @param onExit Registers what runs as this process exits (the removal of
 *   its own groups), once, when the backend is opened.
 * @returns The backend, or why none can be had.
 */
export function cgroupBackend(
  runtime: RuntimeName,
  fs: CgroupFs = REAL_CGROUP_FS,
  onExit?: (callback: () => void) => void,
): CgroupBackend | { error: string } {
  if (fs === REAL_CGROUP_FS && opened !== undefined) return opened;
  const result = openHere(runtime, fs);
  if (fs === REAL_CGROUP_FS) opened = result;
  if (!("error" in result)) onExit?.(() => result.close());
  return result;
}

function openHere(
  runtime: RuntimeName,
  fs: CgroupFs,
): CgroupBackend | { error: string } {
  if (process.platform !== "linux") {
    return { error: `cgroups are Linux's, and this is ${process.platform}` };
  }
  let self: { pid: number; start: string } | undefined;
  try {
    self = parseProcStat(fs.read("/proc/self/stat"));
  } catch (error: unknown) {
    const denied = runtime === "deno" &&
      (error as { name?: unknown }).name === "NotCapable";
    return {
      error: denied
        ? "a Deno parent reads /proc and /sys/fs/cgroup only with --allow-all (-A); run it with -A"
        : `cannot read /proc/self/stat (${failure(error)})`,
    };
  }
  if (self === undefined) return { error: "cannot parse /proc/self/stat" };
  const places = readCgroupPlaces(fs);
  if ("error" in places) return places;
  const context: CgroupContext = {
    fs,
    pid: self.pid,
    start: self.start,
    kill: (pid) => {
      process.kill(pid, "SIGKILL");
    },
    alive: (pid, start) => {
      try {
        return parseProcStat(fs.read(`/proc/${pid}/stat`))?.start === start;
      } catch {
        return false;
      }
    },
  };
  return openCgroupBackend(places, context);
}
