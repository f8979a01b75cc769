/**
 * The file operations the cgroup backends make, behind one small interface:
 * the real cgroup file systems in production, a tree of plain files in a
 * temporary directory in tests (where a cgroup v2 hierarchy cannot be had).
 *
 * @module
 */

import {
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  writeFileSync,
} from "../../node_builtins.ts";

/** What a cgroup backend does to the file system. */
export interface CgroupFs {
  /** Reads a control file (or `/proc` file) as text; throws when it cannot. */
  read(path: string): string;
  /** Writes a control file; throws when the kernel refuses. */
  write(path: string, text: string): void;
  /** Makes a group (a directory); throws when it exists or cannot be made. */
  mkdir(path: string): void;
  /** Removes an empty group; throws while processes remain in it. */
  rmdir(path: string): void;
  /** The names of the entries of a directory. */
  list(path: string): string[];
}

/** The real file system: cgroupfs and `/proc`. */
export const REAL_CGROUP_FS: CgroupFs = {
  read: (path) => readFileSync(path, "utf8"),
  write: (path, text) => writeFileSync(path, text),
  mkdir: (path) => mkdirSync(path),
  rmdir: (path) => rmdirSync(path),
  list: (path) => readdirSync(path),
};

/**
 * The message of a failed file operation, for an error that names it.
 *
 * @param error What was thrown.
 * @returns Its message, or its text.
 */
export function failure(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === "string" ? code : error.message;
  }
  return String(error);
}
