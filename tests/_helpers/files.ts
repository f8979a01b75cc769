/**
 * Fixture URLs and scratch directories.
 *
 * @module
 */

import { mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import "./deno_dir.ts";

/**
 * The URL of a fixture module.
 *
 * @param name File name under tests/fixtures/.
 * @returns Its URL.
 */
export function fixture(name: string): URL {
  return new URL(`../fixtures/${name}`, import.meta.url);
}

/** A temporary directory that is removed when disposed. */
export interface ScratchDir {
  /** Its absolute path. */
  readonly path: string;
  /**
   * A path inside it.
   *
   * @param parts Path segments below the directory.
   * @returns The joined absolute path.
   */
  join(...parts: string[]): string;
  /** Removes it and everything in it (idempotent). */
  [Symbol.dispose](): void;
}

/**
 * A fresh temporary directory for one test, removed with everything in it
 * when the test's `using` scope ends.
 *
 * @param name A short name for the directory (it shows in its path).
 * @returns The directory.
 *
 * @example
 * ```ts ignore
 * test("writes a file", () => {
 *   using dir = scratchDir("writes");
 *   writeFileSync(dir.join("a.txt"), "x");
 * });
 * ```
 */
export function scratchDir(name = "test"): ScratchDir {
  const path = mkdtempSync(join(tmpdir(), `airlock-${name}-`));
  return {
    path,
    join: (...parts: string[]) => join(path, ...parts),
    [Symbol.dispose]() {
      rmSync(path, { recursive: true, force: true });
    },
  };
}

/**
 * Writes a file as an edit long settled would leave it: its modification
 * time a minute in the past (a warm mark records a file modified during its
 * warm-up as unsettled, and a test's processes start within a second).
 *
 * @param path The file.
 * @param text Its contents.
 */
export function writeSettled(path: string, text: string): void {
  writeFileSync(path, text);
  const past = new Date(Date.now() - 60_000);
  utimesSync(path, past, past);
}
