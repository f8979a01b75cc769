/**
 * Where this process's cgroups are: the cgroup file systems mounted here
 * (`/proc/self/mountinfo`) and this process's group in each
 * (`/proc/self/cgroup`), turned into the directories of its own groups. Pure
 * parsing plus one reader; the backends decide what they can do there.
 *
 * @module
 */

import type { CgroupFs } from "./cgroup_fs.ts";

/** One cgroup mount from `/proc/self/mountinfo`. */
export interface CgroupMount {
  /** Where it is mounted. */
  mountPoint: string;
  /** The group of the hierarchy shown at the mount point (`/` unless a bind or namespace). */
  root: string;
  /** `1` for a v1 hierarchy, `2` for the unified one. */
  version: 1 | 2;
  /** The controllers of a v1 hierarchy (`memory`, `pids`, …); empty for v2. */
  controllers: readonly string[];
}

/** Undoes mountinfo's octal escapes (`\040` for a space). */
function unescape(field: string): string {
  return field.replace(
    /\\([0-7]{3})/g,
    (_, octal: string) => String.fromCharCode(parseInt(octal, 8)),
  );
}

/**
 * The cgroup mounts in a `/proc/self/mountinfo` text.
 *
 * @param text The file's text.
 * @returns The v1 and v2 cgroup mounts, in file order.
 *
 * @example
 * ```ts
 * import { parseCgroupMounts } from "./cgroup_host.ts";
 * import assert from "node:assert/strict";
 *
 * const text = [
 *   "30 25 0:26 / /sys/fs/cgroup/memory rw,relatime shared:9 - cgroup cgroup rw,memory",
 *   "31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw",
 * ].join("\n");
 * assert.deepEqual(parseCgroupMounts(text), [
 *   { mountPoint: "/sys/fs/cgroup/memory", root: "/", version: 1, controllers: ["memory"] },
 *   { mountPoint: "/sys/fs/cgroup/unified", root: "/", version: 2, controllers: [] },
 * ]);
 * ```
 */
export function parseCgroupMounts(text: string): CgroupMount[] {
  const mounts: CgroupMount[] = [];
  for (const line of text.split("\n")) {
    const fields = line.split(" ");
    const dash = fields.indexOf("-");
    if (dash < 6) continue;
    const type = fields[dash + 1];
    if (type !== "cgroup" && type !== "cgroup2") continue;
    const root = unescape(fields[3] ?? "");
    const mountPoint = unescape(fields[4] ?? "");
    const options = (fields[dash + 3] ?? "").split(",");
    mounts.push({
      mountPoint,
      root,
      version: type === "cgroup2" ? 2 : 1,
      controllers: type === "cgroup2"
        ? []
        : options.filter((option) =>
          option !== "rw" && option !== "ro" && !option.includes("=")
        ),
    });
  }
  return mounts;
}

/** This process's groups, from `/proc/self/cgroup`. */
export interface ProcessCgroups {
  /** The group in each v1 hierarchy, by controller. */
  v1: ReadonlyMap<string, string>;
  /** The group in the unified (v2) hierarchy, if listed. */
  v2: string | undefined;
}

/**
 * Parses `/proc/self/cgroup`: `hierarchy-id:controllers:path` lines, where
 * id 0 with no controllers is the unified hierarchy.
 *
 * @param text The file's text.
 * @returns The groups.
 *
 * @example
 * ```ts
 * import { parseProcessCgroups } from "./cgroup_host.ts";
 * import assert from "node:assert/strict";
 *
 * const groups = parseProcessCgroups("8:pids:/\n4:memory:/app/x\n0::/\n");
 * assert.equal(groups.v1.get("memory"), "/app/x");
 * assert.equal(groups.v2, "/");
 * ```
 */
export function parseProcessCgroups(text: string): ProcessCgroups {
  const v1 = new Map<string, string>();
  let v2: string | undefined;
  for (const line of text.split("\n")) {
    const first = line.indexOf(":");
    const second = line.indexOf(":", first + 1);
    if (first < 0 || second < 0) continue;
    const id = line.slice(0, first);
    const controllers = line.slice(first + 1, second);
    const path = line.slice(second + 1);
    if (id === "0" && controllers === "") {
      v2 = path;
      continue;
    }
    for (const name of controllers.split(",")) {
      if (name !== "") v1.set(name, path);
    }
  }
  return { v1, v2 };
}

/**
 * The directory of a group as seen through a mount: `undefined` when the
 * group lies outside what the mount shows.
 */
function groupDir(mount: CgroupMount, group: string): string | undefined {
  const root = mount.root.endsWith("/") ? mount.root : `${mount.root}/`;
  if (group !== mount.root && !group.startsWith(root)) return undefined;
  const rest = group === mount.root ? "" : group.slice(root.length - 1);
  return `${mount.mountPoint}${rest === "/" ? "" : rest}`;
}

/** The directories of this process's own groups. */
export interface CgroupPlaces {
  /** Its group in the v1 hierarchy of each controller (memory, pids), when mounted. */
  v1: Readonly<Partial<Record<"memory" | "pids", string>>>;
  /** Its group in the unified hierarchy, when mounted. */
  v2: string | undefined;
}

/**
 * Where this process's own groups are, from the texts of
 * `/proc/self/mountinfo` and `/proc/self/cgroup`.
 *
 * @param mountinfo The mount table's text.
 * @param cgroup The process's cgroup file's text.
 * @returns The directories.
 *
 * @example
 * ```ts
 * import { cgroupPlaces } from "./cgroup_host.ts";
 * import assert from "node:assert/strict";
 *
 * const places = cgroupPlaces(
 *   "30 25 0:26 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n" +
 *     "31 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n",
 *   "4:memory:/app/x\n0::/\n",
 * );
 * assert.deepEqual(places, {
 *   v1: { memory: "/sys/fs/cgroup/memory/app/x" },
 *   v2: "/sys/fs/cgroup/unified",
 * });
 * ```
 */
export function cgroupPlaces(mountinfo: string, cgroup: string): CgroupPlaces {
  const mounts = parseCgroupMounts(mountinfo);
  const groups = parseProcessCgroups(cgroup);
  const v1: Partial<Record<"memory" | "pids", string>> = {};
  for (const controller of ["memory", "pids"] as const) {
    const group = groups.v1.get(controller);
    const mount = mounts.find((m) =>
      m.version === 1 && m.controllers.includes(controller)
    );
    if (group === undefined || mount === undefined) continue;
    const dir = groupDir(mount, group);
    if (dir !== undefined) v1[controller] = dir;
  }
  const unified = mounts.find((m) => m.version === 2);
  const v2 = unified === undefined || groups.v2 === undefined
    ? undefined
    : groupDir(unified, groups.v2);
  return { v1, v2 };
}

/**
 * Reads where this process's groups are.
 *
 * @param fs The file system.
 * @param proc The `/proc` directory of this process (`/proc/self`).
 * @returns The directories, or an error detail when /proc cannot be read.
 */
export function readCgroupPlaces(
  fs: CgroupFs,
  proc = "/proc/self",
): CgroupPlaces | { error: string } {
  try {
    return cgroupPlaces(
      fs.read(`${proc}/mountinfo`),
      fs.read(`${proc}/cgroup`),
    );
  } catch (error: unknown) {
    return {
      error: `cannot read ${proc}/mountinfo and ${proc}/cgroup (${
        error instanceof Error ? error.message : String(error)
      })`,
    };
  }
}
