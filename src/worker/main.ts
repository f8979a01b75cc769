/**
 * The worker process's main routine: load the user's module, check its
 * default export, then serve it; report a load failure as a `fatal` message
 * before exiting.
 *
 * @module
 */

import { encodeMessage } from "../protocol/encode_message.ts";
import { CONTROL_ID } from "../protocol/messages.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import { isWorkerDefinition } from "./define_worker.ts";
import { serve } from "./serve.ts";
import { startParentWatchdog } from "./watchdog.ts";

/** Options of {@linkcode runWorker}. */
export interface RunWorkerOptions {
  /**
   * Start the parent-death watchdog thread (see `watchdog.ts`): for workers
   * the parent could not wrap in a parent-death signal.
   *
   * @default {false}
   */
  parentWatchdog?: boolean;
}

async function fatal(
  adapter: RuntimeAdapter,
  phase: "import" | "definition",
  error: unknown,
): Promise<never> {
  const reported = error instanceof Error
    ? withPosition(error)
    : new Error(`non-error thrown: ${String(error)}`);
  try {
    await adapter.workerStdio().write(
      encodeMessage({ type: "fatal", id: CONTROL_ID, phase, error: reported }),
    );
  } catch {
    // The parent cannot hear it: stderr is all that is left. (Once sent,
    // the parent's start error carries the stack: printing it here too
    // showed it three times, live, in the message and in the stderr tail.)
    adapter.writeStderr(`${reported.stack ?? reported.message}\n`);
  }
  return adapter.exit(1);
}

/**
 * Bun reports a syntax error (`BuildMessage`) or an unresolvable import
 * (`ResolveMessage`) with its file and line in `position`, not in the
 * message or a stack (`BuildMessage: Unexpected ;`). Such an error is
 * rebuilt with the place in its message and a stack that shows the line.
 */
function withPosition(error: Error): Error {
  let position: unknown;
  try {
    position = (error as { position?: unknown }).position ??
      (error as { errors?: { position?: unknown }[] }).errors?.[0]?.position;
  } catch {
    return error;
  }
  if (typeof position !== "object" || position === null) return error;
  const { file, line, column, lineText } = position as Record<string, unknown>;
  if (typeof file !== "string" || typeof line !== "number") return error;
  const where = `${file}:${line}${
    typeof column === "number" ? `:${column}` : ""
  }`;
  const rebuilt = new Error(`${error.message} (at ${where})`);
  rebuilt.name = error.name;
  const gutter = " ".repeat(String(line).length);
  const excerpt = typeof lineText === "string" && typeof column === "number"
    ? `\n  ${line} | ${lineText}\n  ${gutter} | ${
      " ".repeat(Math.max(0, column - 1))
    }^`
    : "";
  rebuilt.stack =
    `${error.name}: ${rebuilt.message}\n    at ${where}${excerpt}`;
  return rebuilt;
}

/**
 * Loads a worker module and serves its default export.
 *
 * @param adapter The runtime's adapter.
 * @param load Imports the user's module (a dynamic `import()`, or a bundled module).
 * @param label The module's name, for messages.
 * @param options Whether to start the parent-death watchdog.
 * @returns Never: the process exits.
 */
export async function runWorker(
  adapter: RuntimeAdapter,
  load: () => Promise<unknown>,
  label: string,
  options: RunWorkerOptions = {},
): Promise<never> {
  if (options.parentWatchdog) {
    // Before the import: a module may block at import time too.
    try {
      startParentWatchdog(adapter.ppid());
    } catch (error: unknown) {
      adapter.writeStderr(
        `airlock worker: cannot start the parent-death watchdog: ${
          error instanceof Error ? error.message : String(error)
        }\n`,
      );
    }
  }
  let namespace: unknown;
  try {
    namespace = await load();
  } catch (error: unknown) {
    return fatal(adapter, "import", error);
  }
  const definition = (namespace as { default?: unknown } | null)?.default;
  if (!isWorkerDefinition(definition)) {
    return fatal(
      adapter,
      "definition",
      new TypeError(
        `Worker module "${label}" must export a defineWorker(...) definition as its default export, found ${
          definition === undefined ? "no default export" : typeof definition
        }`,
      ),
    );
  }
  return serve(definition, adapter);
}
