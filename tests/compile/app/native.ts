// deno-lint-ignore-file no-console
// A compiled program whose worker loads a native add-on shipped beside the
// executable (node_modules/ next to it), built by
// tests/compile/compile_test.ts. Argument `--node-path` gives the worker
// NODE_PATH; without it the add-on is not found. Prints one JSON line.
import { dirname, join } from "node:path";
import process from "node:process";
import { session } from "../../../mod.ts";
import type native from "./workers/native_worker.ts";

const modules = join(dirname(process.execPath), "node_modules");
try {
  await using s = await session<typeof native>(
    new URL("./workers/native_worker.ts", import.meta.url),
    {
      env: process.argv.includes("--node-path") ? { NODE_PATH: modules } : {},
      permissions: { read: [modules] },
      onStderr: () => {},
    },
  );
  console.log(JSON.stringify({ addonExport: await s.addonExport() }));
} catch (error: unknown) {
  console.log(JSON.stringify({
    error: error instanceof Error
      ? `${error.name}: ${error.message}`
      : String(error),
  }));
}
