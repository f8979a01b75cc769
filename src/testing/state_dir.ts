/**
 * A temporary state directory per test, removed afterwards.
 *
 * @module
 */

import { mkdtempSync, realpathSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** A temporary directory for a worker's state, removed when disposed. */
export interface StateDir {
  /** Its absolute real path (symlinks resolved, as the OS sandbox needs). */
  readonly path: string;
  /** Read and write grants for it, to spread into `permissions`. */
  readonly permissions: { read: string[]; write: string[] };
  /** The directory as a `watch` list. */
  readonly watch: string[];
  /**
   * A path inside it.
   *
   * @param parts Path segments below the directory.
   * @returns The absolute path.
   */
  join(...parts: string[]): string;
  /** Removes it and everything in it (idempotent). */
  remove(): void;
  /** Removes it (for `using`). */
  [Symbol.dispose](): void;
  /** Removes it (for `await using`). */
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Makes a fresh temporary directory for one test's worker state, ready to
 * pass to `permissions` (`read` and `write`) and `watch`, and removed with
 * everything in it when the `using` scope ends. Declare it before the
 * session or pool that uses it, so the worker is closed first.
 *
 * @param name A short name, part of the directory's name.
 * @returns The directory.
 *
 * @example A directory removed at the end of the scope
 * ```ts
 * import { stateDir } from "./state_dir.ts";
 * import assert from "node:assert/strict";
 * import { existsSync, writeFileSync } from "node:fs";
 *
 * let path: string;
 * {
 *   using dir = stateDir("example");
 *   path = dir.path;
 *   writeFileSync(dir.join("app.db"), "");
 *   assert.deepEqual(dir.permissions, { read: [dir.path], write: [dir.path] });
 *   assert.deepEqual(dir.watch, [dir.path]);
 * }
 * assert.equal(existsSync(path), false);
 * ```
 *
 * @example With a session (needs a worker module)
 * ```ts ignore
 * import { session } from "@airlock/airlock";
 * import { stateDir } from "@airlock/airlock/testing";
 *
 * await using dir = stateDir("db");
 * await using db = await session(new URL("./db_worker.ts", import.meta.url), {
 *   permissions: dir.permissions,
 *   watch: dir.watch,
 *   setup: [["open", dir.join("app.db")]],
 * });
 * ```
 */
export function stateDir(name = "state"): StateDir {
  if (typeof name !== "string" || !/^[\w.-]{1,64}$/.test(name)) {
    throw new TypeError(
      `Invalid state directory name: expected 1 to 64 letters, digits, ".", "-" or "_", received ${
        JSON.stringify(name)
      }`,
    );
  }
  const path = realpathSync(mkdtempSync(join(tmpdir(), `airlock-${name}-`)));
  const remove = () => rmSync(path, { recursive: true, force: true });
  return {
    path,
    permissions: { read: [path], write: [path] },
    watch: [path],
    join: (...parts: string[]) => join(path, ...parts),
    remove,
    [Symbol.dispose]: remove,
    [Symbol.asyncDispose]: () => Promise.resolve(remove()),
  };
}
