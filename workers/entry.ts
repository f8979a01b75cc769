/**
 * The program a worker process runs. Deno workers run a generated `data:`
 * main module that calls {@linkcode runEntry} with an analysable dynamic
 * import of the user's module (no read permission needed); Bun workers run
 * this file as `entry.ts <module URL> [--parent-watchdog]`.
 *
 * @module
 */

import {
  CHMOD_FALLBACK_FLAG,
  installChmodFallback,
} from "../src/worker/chmod_fallback.ts";
import { installStdoutGuard } from "../src/worker/stdout_guard.ts";
import { detect } from "../src/runtime/detect.ts";
import { runWorker, type RunWorkerOptions } from "../src/worker/main.ts";

/** The flag that starts the parent-death watchdog (`entry.ts <module URL> --parent-watchdog`). */
export const PARENT_WATCHDOG_FLAG = "--parent-watchdog";

export { CHMOD_FALLBACK_FLAG };

/** What {@linkcode runEntry} starts besides the worker. */
export interface RunEntryOptions extends RunWorkerOptions {
  /**
   * Whether a Bun worker retries a chmod by path refused with EPERM
   * through a descriptor (src/worker/chmod_fallback.ts; Deno's always do).
   */
  chmodFallback?: boolean;
}

/**
 * Moves console output off stdout, loads the user's module and serves its
 * default export until shutdown or end-of-file.
 *
 * @param load Imports the user's module.
 * @param label The module's display name.
 * @param options Whether to start the parent-death watchdog (for workers
 *   the parent could not wrap in a parent-death signal) and, on Bun, the
 *   chmod retry.
 * @returns Never: the process exits.
 */
export function runEntry(
  load: () => Promise<unknown>,
  label: string,
  options: RunEntryOptions = {},
): Promise<never> {
  installStdoutGuard();
  const deno =
    (globalThis as { Deno?: Parameters<typeof installChmodFallback>[0] }).Deno;
  if (deno !== undefined || options.chmodFallback === true) {
    installChmodFallback(deno);
  }
  return runWorker(detect(), load, label, {
    parentWatchdog: options.parentWatchdog === true,
  });
}

if (import.meta.main) {
  const adapter = detect();
  const [specifier = "", ...flags] = adapter.args();
  if (specifier === "") {
    adapter.writeStderr(
      `airlock worker: missing the worker module URL (usage: entry.ts <module URL> [${PARENT_WATCHDOG_FLAG}] [${CHMOD_FALLBACK_FLAG}])\n`,
    );
    adapter.exit(2);
  }
  await runEntry(() => import(specifier), specifier, {
    parentWatchdog: flags.includes(PARENT_WATCHDOG_FLAG),
    chmodFallback: flags.includes(CHMOD_FALLBACK_FLAG),
  });
}
