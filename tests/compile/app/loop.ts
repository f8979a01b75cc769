// deno-lint-ignore-file no-console
// A program NOT set up for self-exec: it reaches session() without going
// through mod.ts, so a copy of it started as a worker runs this main code
// again instead of serving the worker. The depth guard must stop it.
// Built by tests/compile/compile_test.ts. Not a test file.
import process from "node:process";
import { session } from "../../../src/parent/session.ts";

try {
  const s = await session(
    new URL("./workers/probe_worker.ts", import.meta.url),
    { maxRetries: 0, onStderr: () => {} },
  );
  await s.close();
  console.log("started: the guard did not stop the loop");
  process.exit(0);
} catch (error: unknown) {
  console.log(error instanceof Error ? error.message : String(error));
  process.exit(3);
}
