/**
 * Path helpers shared by the sandbox backends (the bubblewrap argv builder,
 * mount discovery, the Landlock ruleset): normalising absolute paths and
 * comparing them as trees. Pure.
 *
 * @module
 */

import { posix } from "../node_builtins.ts";

/**
 * An absolute POSIX path, normalised, without a trailing slash.
 *
 * @param path The path.
 * @param name Its name in the error message.
 * @returns The normalised path.
 * @throws {RangeError} when it is not absolute.
 */
export function normalizePath(path: string, name: string): string {
  if (typeof path !== "string" || !posix.isAbsolute(path)) {
    throw new RangeError(
      `Invalid sandbox path "${name}": expected an absolute path, received ${
        JSON.stringify(path)
      }`,
    );
  }
  const normalized = posix.normalize(path);
  return normalized.length > 1 ? normalized.replace(/\/+$/, "") : normalized;
}

/** Whether `outer` is `inner` or one of its ancestors. */
export function covers(outer: string, inner: string): boolean {
  if (outer === "/") return true;
  return inner === outer || inner.startsWith(`${outer}/`);
}

/** The paths not covered by another one of the list, deduplicated. */
export function minimal(paths: readonly string[]): string[] {
  const unique = [...new Set(paths)];
  return unique.filter((path) =>
    !unique.some((other) => other !== path && covers(other, path))
  );
}

/**
 * How deep a path is (`/` is 0), for mount ordering.
 *
 * @param path A normalised absolute path.
 * @returns Its number of components.
 */
export function depth(path: string): number {
  return path === "/" ? 0 : path.split("/").length - 1;
}
