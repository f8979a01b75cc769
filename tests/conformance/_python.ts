/**
 * Finds a Python 3.9+ interpreter for the Python worker tests, by its
 * absolute path (workers start with a cleared environment, so `python3`
 * alone would be looked up differently by Deno and Bun).
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";

/** The Python worker's launcher (the package `airlock_worker/` is beside it). */
export const PYTHON_ENTRY: string = fileURLToPath(
  new URL("../../workers/python/airlock_worker.py", import.meta.url),
);

/**
 * The path of a Python fixture worker.
 *
 * @param name File name under tests/fixtures/python/.
 * @returns Its absolute path.
 */
export function pythonFixture(name: string): string {
  return fileURLToPath(
    new URL(`../fixtures/python/${name}`, import.meta.url),
  );
}

/** The interpreter found, or why there is none. */
export interface PythonFound {
  /** Its absolute path, when found. */
  path?: string;
  /** Its version, e.g. `"3.11.7"`. */
  version?: string;
  /** Why the tests skip, when not found. */
  skip?: string;
}

/**
 * Looks for `python3` on the test process's PATH (or `$AIRLOCK_PYTHON`)
 * and asks it for its absolute path and version.
 *
 * @returns The interpreter, or a reason to skip.
 */
export function findPython(): PythonFound {
  const program = process.env.AIRLOCK_PYTHON || "python3";
  try {
    const out = execFileSync(program, [
      "-c",
      "import platform, sys; print(sys.executable); print(platform.python_version()); print(int(sys.version_info >= (3, 9)))",
    ], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    const [path, version, recent] = out.trim().split("\n");
    if (!path) return { skip: `${program} did not report its path` };
    if (recent !== "1") {
      return {
        skip: `${program} is Python ${version}, 3.9 or newer is needed`,
      };
    }
    return { path, version: version ?? "" };
  } catch (error: unknown) {
    return {
      skip: `${program} cannot run here (${
        error instanceof Error ? error.message.split("\n")[0] : String(error)
      })`,
    };
  }
}
