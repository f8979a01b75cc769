/**
 * The lookups of a launch, each made once per process: the worker
 * runtime's binary and the Linux tools (bubblewrap, setpriv), through the
 * one executable lookup (`executable.ts`). A lookup the parent may not make
 * is a `PermissionError`, never "not found".
 *
 * @module
 */

import { PermissionError, WorkerStartError } from "../../errors.ts";
import { dirname, fileURLToPath, process } from "../node_builtins.ts";
import type { RuntimeAdapter, RuntimeName } from "../types.ts";
import {
  findExecutable,
  type LookupDenied,
  trustedRealPath,
} from "./executable.ts";
import type { WorkerCommandInput } from "./types.ts";

/** The PATH searched when the parent's own cannot be read. */
export const DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin";

/** Lookups of the process, made once: binaries do not move. */
const found = new Map<string, string | null>();

function cached(
  key: string,
  look: () => string | undefined,
): string | undefined {
  if (!found.has(key)) found.set(key, look() ?? null);
  return found.get(key) ?? undefined;
}

/**
 * What a lookup that cannot be made, or a binary that is refused, becomes:
 * a `PermissionError` naming the program, the cause and the fix. Never "not
 * found": a parent that may not look must not start a worker with less
 * confinement or another binary than it would otherwise.
 *
 * @param label The worker's display name.
 * @param program What was looked up, for the message.
 * @param permission The error's `permission`.
 * @returns The callback for the lookup.
 */
export function lookupDenied(
  label: string,
  program: string,
  permission: "runtime" | "sandbox",
): LookupDenied {
  return (detail, cause) => {
    const fix = cause === undefined
      ? ""
      : "; give the parent read access to the directories on PATH and to node_modules/.bin (Deno: --allow-read)";
    throw new PermissionError(
      `cannot look up ${program}: ${detail}${fix}`,
      { module: label, permission, ...(cause === undefined ? {} : { cause }) },
    );
  };
}

/**
 * The binary of a worker runtime (real path): the parent's own, or the
 * other one found on PATH or in `node_modules/.bin` above the current
 * directory and the module. Looked up once per process.
 *
 * @param runtime The worker's runtime.
 * @param adapter The parent's runtime.
 * @param input The resolved options (module, label).
 * @returns The binary.
 * @throws {WorkerStartError} when it is missing (`failure: "spawn"`).
 * @throws {PermissionError} when it cannot be looked up or is refused.
 */
export function runtimeBinary(
  runtime: RuntimeName,
  adapter: RuntimeAdapter,
  input: WorkerCommandInput,
): string {
  const denied = lookupDenied(input.label, `the ${runtime} binary`, "runtime");
  if (runtime === adapter.name) {
    return cached(
      `self:${runtime}`,
      () => trustedRealPath(adapter.execPath(), denied),
    ) ?? adapter.execPath();
  }
  const from = [adapter.cwd()];
  if (input.moduleUrl?.protocol === "file:") {
    from.push(dirname(fileURLToPath(input.moduleUrl)));
  }
  const binary = cached(
    `runtime:${runtime}`,
    () => findExecutable(runtime, { path: adapter.env("PATH"), from }, denied),
  );
  if (binary === undefined) {
    throw new WorkerStartError({
      module: input.label,
      failure: "spawn",
      detail:
        `the ${runtime} binary was not found on PATH nor in node_modules/.bin; install it (npm install --save-dev ${runtime}) or choose another runtime`,
    });
  }
  return binary;
}

/**
 * A Linux system tool (bubblewrap, setpriv, prlimit) on PATH, looked up once.
 *
 * @param name The tool.
 * @param adapter The parent's runtime.
 * @param denied What a lookup that cannot be made becomes.
 * @returns Its real path, or `undefined` when missing or not on Linux.
 */
export function linuxTool(
  name: "bwrap" | "setpriv" | "prlimit",
  adapter: RuntimeAdapter,
  denied: LookupDenied,
): string | undefined {
  if (process.platform !== "linux") return undefined;
  return cached(
    name,
    () =>
      findExecutable(
        name,
        { path: adapter.env("PATH") ?? DEFAULT_PATH },
        denied,
      ),
  );
}
