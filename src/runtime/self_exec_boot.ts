/**
 * The worker side of self-exec at import: a program that started itself as
 * a worker (a compiled executable, or `AIRLOCK_SELF_EXEC=1`) serves the
 * worker module here, and its own main code, which waits for this module
 * (`mod.ts` imports it), never runs. See docs/operations.md, "Single
 * compiled binaries".
 *
 * The worker side loads only then, through literal specifiers (`deno
 * compile` and Bun's bundler still include it), so a parent that imports
 * airlock does not pay for it (tests/runtime/import_graph_test.ts). Nothing
 * is awaited in a process that is not a self-exec worker: Bun's `require()`
 * of a module whose evaluation awaits fails.
 *
 * @module
 */

import { detect } from "./detect.ts";
import { selfExecWorker } from "./self_exec.ts";

const selfExec = selfExecWorker();
if (selfExec) {
  const [{ installStdoutGuard }, { runWorker }] = await Promise.all([
    import("../worker/stdout_guard.ts"),
    import("../worker/main.ts"),
  ]);
  installStdoutGuard();
  await runWorker(detect(), selfExec.load, selfExec.label);
}
