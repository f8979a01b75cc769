/**
 * The worker process's main routine: load the user's module, check its
 * default export, then serve it; report a load failure as a `fatal` message
 * before exiting.
 *
 * @module
 */

import { encodeMessage } from "../protocol/messages.ts";
import { CONTROL_ID } from "../protocol/messages.ts";
import type { RuntimeAdapter } from "../runtime/types.ts";
import { isWorkerDefinition } from "./define_worker.ts";
import { serve } from "./serve.ts";

async function fatal(
  adapter: RuntimeAdapter,
  phase: "import" | "definition",
  error: unknown,
): Promise<never> {
  const reported = error instanceof Error
    ? error
    : new Error(`non-error thrown: ${String(error)}`);
  try {
    await adapter.workerStdio().write(
      encodeMessage({ type: "fatal", id: CONTROL_ID, phase, error: reported }),
    );
  } catch {
    // Fall back to stderr alone.
  }
  adapter.writeStderr(`${reported.stack ?? reported.message}\n`);
  return adapter.exit(1);
}

/**
 * Loads a worker module and serves its default export.
 *
 * @param adapter The runtime's adapter.
 * @param load Imports the user's module (a dynamic `import()`, or a bundled module).
 * @param label The module's name, for messages.
 * @returns Never: the process exits.
 */
export async function runWorker(
  adapter: RuntimeAdapter,
  load: () => Promise<unknown>,
  label: string,
): Promise<never> {
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
