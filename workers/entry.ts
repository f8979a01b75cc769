/**
 * The program a worker process runs. Deno workers run a generated `data:`
 * main module that calls {@linkcode runEntry} with an analysable dynamic
 * import of the user's module (no read permission needed); Bun workers run
 * this file as `entry.ts <module URL>`.
 *
 * @module
 */

import { installStdoutGuard } from "../src/worker/stdout_guard.ts";
import { detect } from "../src/runtime/detect.ts";
import { runWorker } from "../src/worker/main.ts";

/**
 * Moves console output off stdout, loads the user's module and serves its
 * default export until shutdown or end-of-file.
 *
 * @param load Imports the user's module.
 * @param label The module's display name.
 * @returns Never: the process exits.
 */
export function runEntry(
  load: () => Promise<unknown>,
  label: string,
): Promise<never> {
  installStdoutGuard();
  return runWorker(detect(), load, label);
}

if (import.meta.main) {
  const adapter = detect();
  const specifier = adapter.args()[0] ?? "";
  if (specifier === "") {
    adapter.writeStderr(
      "airlock worker: missing the worker module URL (usage: entry.ts <module URL>)\n",
    );
    adapter.exit(2);
  }
  await runEntry(() => import(specifier), specifier);
}
